"""A rollout manager runs its own default rollout: no process global leads back to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slime_hookspecs import GenerateOutput, RewardFunctionRecord, hookimpl


class _Engine:
    def __init__(self, token: int) -> None:
        self.token = token

    def generate(self, prompts: list[Any], params: Any) -> list[GenerateOutput]:
        return [GenerateOutput(token_ids=[self.token], log_probs=[-0.1], finish_reason="length",
                               weight_version=0) for _ in prompts]

    def weight_version(self) -> int:
        return 0

    def abort(self) -> None:
        pass


class _Rewards:
    @hookimpl
    def slime_register_reward_functions(self) -> list[RewardFunctionRecord]:
        return [RewardFunctionRecord(name="one", factory=lambda config: lambda sample: 1.0)]


def _manager_and_config(tmp_path: Path) -> tuple[Any, Any]:
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.testing import build_test_config, write_char_tokenizer

    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    manager.register_object(_Rewards(), "one_reward")
    set_manager(manager)
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "a", "label": "1"}\n{"prompt": "b", "label": "2"}\n')
    tok = write_char_tokenizer(tmp_path / "tok")
    config = build_test_config(model={"tokenizer": str(tok)}, data={"path": str(data)},
                               rollout={"reward": "one", "batch_size": 2,
                                        "n_samples_per_prompt": 2})
    return manager, config


def test_the_default_rollout_is_the_managers_own(tmp_path: Path) -> None:
    from slime_core.rollout.manager import DEFAULT_ROLLOUT_PLUGIN, RolloutManager

    manager, config = _manager_and_config(tmp_path)
    source = manager.registries.data_source.get("jsonl").factory(config, "train")
    first = RolloutManager(config, [_Engine(5)], source, None)
    newest = RolloutManager(config, [_Engine(7)], source, None)
    # one default per plugin manager: the newest manager's, called last (trylast)
    impls = manager.hook.slime_rollout.get_hookimpls()
    assert [i.plugin_name for i in impls].count(DEFAULT_ROLLOUT_PLUGIN) == 1
    assert impls[0].plugin_name == DEFAULT_ROLLOUT_PLUGIN and impls[0].trylast
    samples = list(newest.rollout(0).samples())
    assert len(samples) == 4 and {s.tokens[-1] for s in samples} == {7}
    assert first is not newest
