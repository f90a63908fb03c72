"""The core's built-in plugins register their records through the registration hooks."""

from __future__ import annotations

import pytest

from slime_core.plugins import PluginSelection, SlimePluginManager


@pytest.fixture(scope="module")
def pm():
    return SlimePluginManager(PluginSelection(autoload=False)).load().pm


# Exactly what each built-in registers (a subset check let these lists go stale): a record
# added to or dropped from a built-in must be added here too.
BUILTIN_RECORDS: dict[str, dict[str, set[str]]] = {
    "rollout_engine": {"local_engine": {"local"}, "core_observe": {"replay"}},
    "trainer_backend": {"torch_trainer": {"torch"}},
    "advantage_estimator": {},
    "policy_loss": {},
    "kl_estimator": {},
    "is_correction": {},
    "loss_reducer": {},
    "reward_function": {"core_rewards": {
        "exact", "math", "boxed_math", "dapo", "boxed_dapo", "deepscaler", "boxed_deepscaler",
        "f1", "gpqa", "random", "reasoning_gym", "remote"}},
    "data_source": {"core_data": {"jsonl", "parquet", "reasoning_gym"},
                    "core_tools": {"rollout_buffer"}},
    "filter": {"core_filters": {"nonzero_std", "fifo", "lifo", "drop_truncated"}},
    "weight_transport": {"core_weights": {"inprocess", "disk", "ray", "broadcast"}},
    "accelerator": {"core_accelerators": {"cpu", "cuda"}},
    "sandbox": {"core_sandbox": {"local"}},
    "tool": {"core_tools": {"calculator", "python"}},
    "tool_parser": {"core_tools": {"hermes"}},
    "logger": {"core_loggers": {"jsonl", "tensorboard", "wandb"}},
}


def test_every_record_kind_is_listed() -> None:
    from slime_core.plugins.registry import KINDS

    assert set(BUILTIN_RECORDS) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(BUILTIN_RECORDS))
def test_builtin_registration_hooks(pm, kind: str) -> None:
    from slime_core.plugins.registry import KINDS

    hook, _, rtype = KINDS[kind]
    got: dict[str, set[str]] = {}
    for impl in getattr(pm.hook, hook).get_hookimpls():
        produced = impl.function()
        if produced is None:
            continue
        for rec in produced if isinstance(produced, list) else [produced]:
            assert isinstance(rec, rtype), (impl.plugin_name, rec)
            got.setdefault(impl.plugin_name, set()).add(rec.name)
    assert got == BUILTIN_RECORDS[kind]
