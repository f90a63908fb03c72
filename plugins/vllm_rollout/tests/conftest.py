"""Fixtures of the vllm_rollout tests: a config for a tiny Qwen2 that vLLM accepts.

The tests that run vLLM need the venv built by ``plugins/vllm_rollout/ci/make_env.sh``:

    bash plugins/vllm_rollout/ci/make_env.sh
    /tmp/slime-vllm-venv/bin/python -m pytest plugins/vllm_rollout/tests -q

In any other Python they are skipped with the reason; the tests of the plugin without vLLM run
everywhere.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_PLUGIN_ROOT = str(Path(__file__).resolve().parents[1])
if _PLUGIN_ROOT not in sys.path:  # importable from the source tree without installing it
    sys.path.insert(0, _PLUGIN_ROOT)

from slime_core.testing import TINY_QWEN2, write_char_tokenizer  # noqa: E402

ARITH = Path(__file__).resolve().parents[3] / "examples" / "tiny_arith"

#: ``TINY_QWEN2`` with head_dim 32 instead of 8: vLLM's CPU attention kernels support head
#: sizes 32, 64, 80, ... only (``CPUAttentionBackend.get_supported_head_sizes``); ~90k params.
VLLM_QWEN2: dict[str, Any] = dict(
    TINY_QWEN2, hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
    intermediate_size=128,
)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_char_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="session")
def config_data(tokenizer_dir: Path) -> Callable[..., dict[str, Any]]:
    """``config_data(run_dir, **sections)``: a run config (dict) of the vLLM-sized tiny Qwen2 on
    the tiny arithmetic prompts, ``rollout.engine = "vllm"``, with ``sections`` merged in."""
    def make(run_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
        return _config_data(tokenizer_dir, run_dir, **sections)

    return make


def _config_data(tokenizer_dir: Path, run_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, dict[str, Any]] = {
        "run": {"num_rollouts": 2, "run_dir": str(run_dir), "progress": False,
                "loggers": ["jsonl"]},
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(VLLM_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl")},
        "rollout": {"engine": "vllm", "batch_size": 2, "n_samples_per_prompt": 4,
                    "max_new_tokens": 6},
        "train": {"lr": 1e-3},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return data


def resolve_config(data: dict[str, Any], overrides: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """(plugin manager, validated config) as ``core run --plugins slime_grpo,vllm_rollout``
    builds them."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    return resolve(PluginSelection(plugins=["slime_grpo", "vllm_rollout"]), None, overrides, data)


@pytest.fixture(name="resolve_config", scope="session")
def resolve_config_fixture() -> Callable[..., tuple[Any, Any]]:
    """``resolve_config(data, overrides=())`` -> (manager, config)."""
    return resolve_config
