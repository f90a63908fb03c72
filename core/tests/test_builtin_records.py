"""The core's built-in plugins register their records through the registration hooks."""

from __future__ import annotations

import pytest

from slime_core.plugins import PluginSelection, SlimePluginManager


@pytest.fixture(scope="module")
def pm():
    return SlimePluginManager(PluginSelection(autoload=False)).load().pm


@pytest.mark.parametrize(("hook", "names"), [
    ("slime_register_rollout_engines", {"local"}),
    ("slime_register_trainer_backends", {"torch"}),
    ("slime_register_weight_transports", {"inprocess", "disk"}),
    ("slime_register_data_sources", {"jsonl", "parquet", "reasoning_gym"}),
    ("slime_register_reward_functions", {"exact", "math", "reasoning_gym", "remote"}),
    ("slime_register_filters", {"nonzero_std", "fifo", "lifo", "drop_truncated"}),
    ("slime_register_accelerators", {"cpu", "cuda"}),
    ("slime_register_loggers", {"jsonl", "tensorboard", "wandb"}),
    ("slime_register_sandboxes", {"local"}),
])
def test_builtin_registration_hooks(pm, hook: str, names: set[str]) -> None:
    results = getattr(pm.hook, hook)()
    got = {r.name for rs in results for r in (rs if isinstance(rs, list) else [rs])}
    assert names <= got, f"{hook}: missing {names - got}"
