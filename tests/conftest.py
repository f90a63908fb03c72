"""Fixtures of the cross-package tests: a tiny model/tokenizer and a run helper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from slime_core.testing import TINY_QWEN2, write_char_tokenizer
from slime_hookspecs import RewardFunctionRecord, hookimpl

ARITH = Path(__file__).resolve().parents[1] / "examples" / "tiny_arith"


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_char_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def base_config(tokenizer_dir: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """A 2-step GRPO run of a ~50k-parameter Qwen2 on the tiny arithmetic prompts."""
    return {
        "run": {"num_rollouts": 2, "run_dir": str(tmp_path / "run"), "progress": False,
                "loggers": ["jsonl"]},
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl"), "eval_path": str(ARITH / "eval.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6},
        "train": {"lr": 1e-3},
    }


class ModelProbe:
    """Records every model the run builds (``slime_make_model`` fires before each): tests that
    bad data fails before any model loads register one."""

    def __init__(self) -> None:
        self.roles: list[str] = []

    @hookimpl
    def slime_make_model(self, config: Any, role: str) -> None:
        self.roles.append(role)


def reward_record(name: str, fn: Callable[[Any], Any]) -> RewardFunctionRecord:
    """``fn(sample) -> reward`` as the reward function record ``name``: a test plugin returns it
    from ``slime_register_reward_functions`` and the run selects it (``rollout.reward``)."""
    return RewardFunctionRecord(name=name, factory=lambda config: fn, summary=f"test reward {name}")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(run_dir, "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def run_slime() -> Callable[..., Path]:
    """``run_slime(config_dict, plugins=[obj, ...], resume=None, select=("slime_grpo",))`` -> run
    dir (local executor); ``select`` is the ``--plugins`` set."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    def run(data: dict[str, Any], plugins: list[Any] = (), resume: str | None = None,
            overrides: tuple[str, ...] = (), select: tuple[str, ...] = ("slime_grpo",)) -> Path:
        # the names a test plugin registers are checked by the driver, once it is registered
        manager, config = resolve(PluginSelection(plugins=list(select)), None, overrides, data,
                                  check_names=not plugins)
        for i, p in enumerate(plugins):
            manager.register_object(p, f"test_plugin_{i}")
        return run_training(manager, config, resume_dir=resume)

    return run
