"""Fixtures of the slime_lora tests: a tiny model config and a run helper.

``run_slime`` follows ``tests/conftest.py`` but loads ``slime_grpo`` and ``slime_lora`` from
their entry points.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_PLUGIN_ROOT = str(Path(__file__).resolve().parents[1])
if _PLUGIN_ROOT not in sys.path:
    sys.path.insert(0, _PLUGIN_ROOT)

from slime_core.testing import TINY_QWEN2, write_char_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
ARITH = REPO / "examples" / "tiny_arith"
PLUGINS = ("slime_grpo", "slime_lora")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_char_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def lora_config(tokenizer_dir: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """A 2-step GRPO + LoRA run of a ~50k-parameter Qwen2 on the tiny arithmetic prompts."""
    return {
        "run": {"num_rollouts": 2, "run_dir": str(tmp_path / "run"), "progress": False,
                "loggers": ["jsonl"]},
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6,
                    "temperature": 1.0},
        "train": {"lr": 1e-2},
        "lora": {"enabled": True, "rank": 4, "alpha": 8.0},
    }


@pytest.fixture
def resolve_config() -> Callable[..., Any]:
    """``resolve_config(data)`` -> (manager, config) as ``core run`` resolves them."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    def run(data: dict[str, Any]) -> Any:
        return resolve(PluginSelection(plugins=list(PLUGINS)), None, (), data)

    return run


@pytest.fixture
def run_slime() -> Callable[..., Path]:
    """``run_slime(config_dict, resume=None, plugins=[obj, ...])`` -> run dir (local
    executor)."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    def run(data: dict[str, Any], resume: str | None = None, plugins: list[Any] = ()) -> Path:
        # the names a test plugin registers are checked by the driver, once it is registered
        manager, config = resolve(PluginSelection(plugins=list(PLUGINS)), None, (), data,
                                  check_names=not plugins)
        for i, p in enumerate(plugins):
            manager.register_object(p, f"test_plugin_{i}")
        return run_training(manager, config, resume_dir=resume)

    return run
