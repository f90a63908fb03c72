"""``CallerThreadHost``: the event loop runs on a helper thread, the engine calls it queues run
on the calling thread in submission order, and errors reach the right side."""

from __future__ import annotations

import asyncio
import threading

import pytest
from slime_core.rollout.engine_host import CallerThreadHost


def test_calls_run_on_the_calling_thread_while_the_loop_runs_elsewhere() -> None:
    host = CallerThreadHost()
    caller = threading.get_ident()
    seen: list[tuple[str, int]] = []

    def engine_call(tag: str) -> str:
        seen.append((tag, threading.get_ident()))
        return tag.upper()

    async def episode() -> list[str]:
        loop_thread = threading.get_ident()
        assert loop_thread != caller
        # concurrent requests: all queued, served one at a time in submission order
        return await asyncio.gather(*(host.call(engine_call, t) for t in ("a", "b", "c")))

    assert host.run(episode) == ["A", "B", "C"]
    assert [t for t, _ in seen] == ["a", "b", "c"]
    assert {ident for _, ident in seen} == {caller}


def test_an_engine_error_reaches_the_coroutine_and_a_loop_error_the_caller() -> None:
    host = CallerThreadHost()

    def broken() -> None:
        raise RuntimeError("engine 0 died")

    async def handles_it() -> str:
        try:
            await host.call(broken)
        except RuntimeError as exc:
            return f"caught: {exc}"
        return "not raised"

    assert host.run(handles_it) == "caught: engine 0 died"

    async def fails() -> None:
        await host.call(lambda: None)
        raise ValueError("bad sample")

    with pytest.raises(ValueError, match="bad sample"):
        host.run(fails)


def test_builtin_rewards_of_a_main_thread_rollout_run_on_the_main_thread(tmp_path) -> None:
    """math-verify's timeouts use signal.alarm (main thread only): registry reward functions
    of a rollout driven from the main thread run there, not on the loop's helper thread."""
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.rollout.manager import RolloutManager
    from slime_core.testing import build_test_config, write_char_tokenizer
    from slime_hookspecs import GenerateOutput, RewardFunctionRecord, hookimpl

    threads: list[bool] = []

    def reward(sample) -> float:
        threads.append(threading.current_thread() is threading.main_thread())
        return 1.0

    class Rewards:
        @hookimpl
        def slime_register_reward_functions(self):
            return [RewardFunctionRecord(name="where", factory=lambda config: reward)]

    class Engine:
        def generate(self, prompts, params):
            assert threading.current_thread() is threading.main_thread()
            return [GenerateOutput(token_ids=[5], log_probs=[-0.1], finish_reason="length",
                                   weight_version=0) for _ in prompts]

        def weight_version(self) -> int:
            return 0

        def abort(self) -> None:
            pass

    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    manager.register_object(Rewards(), "where_rewards")
    set_manager(manager)
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "a", "label": "1"}\n{"prompt": "b", "label": "2"}\n')
    tok = write_char_tokenizer(tmp_path / "tok")
    config = build_test_config(model={"tokenizer": str(tok)}, data={"path": str(data)},
                               rollout={"reward": "where", "batch_size": 2,
                                        "n_samples_per_prompt": 2})

    source = manager.registries.data_source.get("jsonl").factory(config, "train")
    rollouts = RolloutManager(config, [Engine()], source, None)
    result = rollouts.rollout(0)
    assert len(list(result.samples())) == 4 and threads == [True] * 4


def test_a_rollout_that_fails_during_an_engine_call_reports_its_own_error() -> None:
    # the loop closes while the main thread still runs the call: the rollout's error is the
    # one raised, not "Event loop is closed" from delivering the call's result
    import time

    host = CallerThreadHost()

    def slow_engine_call() -> int:
        time.sleep(0.5)
        return 1

    async def rollout() -> None:
        task = asyncio.ensure_future(host.call(slow_engine_call))
        await asyncio.sleep(0.05)
        raise ValueError("engine 1 died")
        await task  # pragma: no cover

    with pytest.raises(ValueError, match="engine 1 died"):
        host.run(rollout)
