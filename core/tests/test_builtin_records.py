"""The core's built-in plugins register their records through the registration hooks."""

from __future__ import annotations

import pytest
from slime_core.pluginmgr import PluginSelection, SlimePluginManager


@pytest.fixture(scope="module")
def pm():
    return SlimePluginManager(PluginSelection(autoload=False)).load().pluggy


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
    "data_source": {"core_data": {"jsonl", "parquet", "reasoning_gym"}},
    "filter": {"core_filters": {"nonzero_std", "fifo", "lifo", "drop_truncated"}},
    "weight_transport": {"core_weights": {"inprocess", "disk", "ray", "broadcast"}},
    "accelerator": {"core_accelerators": {"cpu", "cuda"}},
    # the agentic records (sandbox, tool, tool_parser) are slime-agent's core_tools/core_sandbox
    "sandbox": {},
    "tool": {},
    "tool_parser": {},
    "logger": {"core_loggers": {"jsonl", "tensorboard", "wandb"}},
    "rollout_schedule": {"rollout_schedules": {"sync", "one_step_off", "fully_async"}},
}


def test_every_record_kind_is_listed() -> None:
    from slime_core.pluginmgr.registry import KINDS

    assert set(BUILTIN_RECORDS) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(BUILTIN_RECORDS))
def test_builtin_registration_hooks(pm, kind: str) -> None:
    from slime_core.pluginmgr.registry import KINDS

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


def test_registry_hook_names_come_from_the_record_types() -> None:
    """Each record type names its registration hook; the registry reads it from there."""
    from slime_core.pluginmgr.registry import KINDS
    from slime_hookspecs.records import RECORD_TYPES

    assert {rt.kind: rt.hook for rt in RECORD_TYPES} == {
        "rollout_engine": "slime_register_rollout_engines",
        "trainer_backend": "slime_register_trainer_backends",
        "advantage_estimator": "slime_register_advantage_estimators",
        "policy_loss": "slime_register_policy_losses",
        "kl_estimator": "slime_register_kl_estimators",
        "is_correction": "slime_register_is_corrections",
        "loss_reducer": "slime_register_loss_reducers",
        "reward_function": "slime_register_reward_functions",
        "data_source": "slime_register_data_sources",
        "filter": "slime_register_filters",
        "weight_transport": "slime_register_weight_transports",
        "accelerator": "slime_register_accelerators",
        "sandbox": "slime_register_sandboxes",
        "tool": "slime_register_tools",
        "tool_parser": "slime_register_tool_parsers",
        "logger": "slime_register_loggers",
        "rollout_schedule": "slime_register_rollout_schedules",
    }
    assert {k: hook for k, (hook, _, _) in KINDS.items()} == {rt.kind: rt.hook for rt in RECORD_TYPES}


def test_records_collects_decorated_factories_and_provides_the_hook() -> None:
    from slime_hookspecs import FilterRecord, PolicyLossRecord, Records

    records = Records()

    @records.register(PolicyLossRecord, "mine", summary="s")
    def mine(config):  # noqa: ANN001, ANN202
        return lambda batch, log_probs: ([], {})

    records.add(FilterRecord(name="keep_all", factory=lambda config: lambda group: None))
    hook = records.hook(PolicyLossRecord)
    assert hook.__name__ == "slime_register_policy_losses"
    assert hook.slime_source[0] == __file__  # core hooks shows the plugin's line, not ours
    assert [r.name for r in hook()] == ["mine"] and hook()[0].factory is mine
    with pytest.raises(ValueError, match="policy loss 'mine' is registered twice"):
        records.register(PolicyLossRecord, "mine")(mine)
