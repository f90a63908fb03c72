"""Fixtures of the slime_ppo tests: source-tree import, a tiny model config and a run helper.

``run_slime`` follows ``tests/conftest.py`` but loads ``slime_grpo`` (the actor's ``ppo`` loss,
the KL estimators, the loss reducers) and ``slime_ppo`` (the critic) from their entry points.
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

ARITH = Path(__file__).resolve().parents[3] / "examples" / "tiny_arith"
PLUGINS = ["slime_grpo", "slime_ppo"]


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_char_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def ppo_config(tokenizer_dir: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """A 3-step PPO run (gae + critic) of a ~50k-parameter Qwen2 on the tiny arithmetic prompts."""
    return {
        "run": {
            "num_rollouts": 3,
            "run_dir": str(tmp_path / "run"),
            "progress": False,
            "loggers": ["jsonl"],
        },
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6},
        "train": {"lr": 1e-3},
        "algorithm": {"advantage_estimator": "gae"},
        "ppo": {"critic_lr": 1e-3},
    }


@pytest.fixture
def run_slime() -> Callable[..., Path]:
    """``run_slime(config_dict, plugins=[obj, ...], resume=None)`` -> run dir (local executor)."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    def run(
        data: dict[str, Any],
        plugins: list[Any] = (),
        resume: str | None = None,
        overrides: tuple[str, ...] = (),
    ) -> Path:
        manager, config = resolve(PluginSelection(plugins=list(PLUGINS)), None, overrides, data)
        for i, p in enumerate(plugins):
            manager.register_object(p, f"test_plugin_{i}")
        return run_training(manager, config, resume_dir=resume)

    return run


@pytest.fixture
def ppo_manager() -> Any:
    """A plugin manager with slime_grpo and slime_ppo, set as this process's manager."""
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    manager, _ = resolve(PluginSelection(plugins=list(PLUGINS)), None, (), {})
    set_manager(manager)
    return manager


@pytest.fixture
def make_config(ppo_manager: Any, tokenizer_dir: Path) -> Callable[..., Any]:
    """``make_config(section=dict, ...)``: a resolved config with the [ppo] section."""
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema

    def make(**sections: dict[str, Any]) -> Any:
        data: dict[str, dict[str, Any]] = {
            "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
            "algorithm": {"advantage_estimator": "gae"},
        }
        for name, values in sections.items():
            data[name] = {**data.get(name, {}), **values}
        return load_config(build_schema(ppo_manager), None, (), data)

    return make
