"""``rollout.reward_processes``: rewards whose records allow it are scored in worker
processes, the others where they always were; a dead worker fails its samples, not the run."""

from __future__ import annotations

import json

import pytest
from slime_core.rewards.processes import InProcesses, RewardProcesses
from slime_hookspecs import Sample

from tests import reward_workers
from tests.cli_support import ARITH, core, tiny_run, write_toml


def test_allowed_rewards_run_in_workers_and_the_others_stay(tmp_path, tokenizer_dir) -> None:
    data = tiny_run(tmp_path, tokenizer_dir, run={"plugin_modules": ["tests.reward_workers"]},
                    rollout={"reward": "pid_pure", "reward_processes": 2},
                    data={"eval_path": str(ARITH / "eval.jsonl")},
                    eval={"interval": 1, "reward": "pid_plain", "max_prompts": 2})
    cfg = write_toml(tmp_path / "run.toml", data)
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r["rollout/reward_mean"] for r in rows if "rollout/reward_mean" in r]
    evals = [r["eval/reward_mean"] for r in rows if "eval/reward_mean" in r]
    assert train == [1.0, 1.0]  # every training sample scored in a worker
    assert evals and set(evals) == {0.0}  # the record without the promise: the rollout's thread


def test_a_dead_worker_fails_its_call_and_the_pool_starts_again() -> None:
    pool = RewardProcesses(1)
    try:
        with pytest.raises(Exception, match="terminated abruptly|process pool"):
            pool.submit(reward_workers.die, Sample()).result(timeout=120)
        ok = InProcesses(reward_workers.pid_factory(None), pool, "reward function 'pid_pure'")
        assert ok(Sample()).result(timeout=120) == 1.0
    finally:
        pool.close()


def test_a_batch_goes_in_one_chunk_per_worker_and_fails_sample_by_sample() -> None:
    pool = RewardProcesses(2)
    try:
        fn = InProcesses(reward_workers.odd_fails, pool, "reward function 'odd'")
        futures = fn.submit_many([Sample(index=i) for i in range(5)])
        assert [futures[i].result(timeout=120) for i in (0, 2, 4)] == [0.0, 2.0, 4.0]
        for i in (1, 3):
            with pytest.raises(ValueError, match=f"sample {i} is odd"):
                futures[i].result(timeout=120)
    finally:
        pool.close()


def test_batches_asked_for_in_one_turn_of_the_loop_go_out_together(monkeypatch) -> None:
    """The rollout scores group by group; groups that finish together (a static decode's)
    are sent as one chunk per worker, each sample's value or exception to its own future.
    Outside an event loop a batch is sent at once, as before."""
    import asyncio

    pool = RewardProcesses(2)
    chunks: list[int] = []
    real = pool.submit_chunk

    def counting(fn, samples):
        chunks.append(len(samples))
        return real(fn, samples)

    monkeypatch.setattr(pool, "submit_chunk", counting)
    fn = InProcesses(reward_workers.odd_fails, pool, "reward function 'odd'")

    async def groups() -> list[list[object]]:
        futures = [fn.submit_many([Sample(index=4 * g + i) for i in range(4)]) for g in range(4)]
        assert chunks == []  # nothing sent before the loop's next turn
        out = []
        for batch in futures:
            out.append([await asyncio.wrap_future(f) if i % 2 == 0 else
                        (await asyncio.gather(asyncio.wrap_future(f), return_exceptions=True))[0]
                        for i, f in enumerate(batch)])
        return out

    try:
        got = asyncio.run(groups())
        assert chunks == [8, 8]  # 4 groups of 4 samples: one chunk per worker
        for g, batch in enumerate(got):
            for i, value in enumerate(batch):
                if i % 2 == 0:
                    assert value == float(4 * g + i)
                else:
                    assert isinstance(value, ValueError)
                    assert f"sample {4 * g + i} is odd" in str(value)
        chunks.clear()
        futures = fn.submit_many([Sample(index=i) for i in (0, 2, 4)])
        assert chunks == [1, 2]  # no running loop: sent at once
        assert [f.result(timeout=120) for f in futures] == [0.0, 2.0, 4.0]
    finally:
        pool.close()


def test_a_batch_left_by_a_loop_closed_before_its_turn_goes_with_the_next() -> None:
    """An event loop closed before the turn that would send its batch (a rollout torn down
    right after asking) strands nothing: the next loop's send takes that batch too."""
    import asyncio

    pool = RewardProcesses(1)
    fn = InProcesses(reward_workers.odd_fails, pool, "reward function 'odd'")

    async def ask(index: int, stop: bool = False) -> list[object]:
        out = fn.submit_many([Sample(index=index)])
        if stop:  # the loop ends with this turn: the send scheduled for the next never runs
            asyncio.get_running_loop().stop()
        return out

    try:
        loop = asyncio.new_event_loop()
        stranded = loop.run_until_complete(ask(2, stop=True))
        loop.close()
        assert not stranded[0].done()

        async def next_rollout() -> float:
            return await asyncio.wrap_future((await ask(4))[0])

        assert asyncio.run(asyncio.wait_for(next_rollout(), 120)) == 4.0
        assert stranded[0].result(timeout=120) == 2.0
    finally:
        pool.close()


def test_warm_starts_the_workers_and_runs_each_function_there_once(tmp_path) -> None:
    """``RewardProcesses.warm`` (called when the rollout manager is built): every worker is
    started at once and scores a throwaway sample with each function, so their imports are
    done before the first rollout; a function that raises there changes nothing."""
    import functools
    import os

    pool = RewardProcesses(2)
    try:
        futures = pool.warm([functools.partial(reward_workers.touch, str(tmp_path)),
                             reward_workers.refuses])
        assert [f.result(timeout=120) for f in futures] == [1, 1]  # `refuses` raised in each
        assert len(pool._pool._processes) == 2  # type: ignore[union-attr]
        pids = {int(p.name) for p in tmp_path.iterdir()}
        assert pids and os.getpid() not in pids
        assert {p.read_text() for p in tmp_path.iterdir()} == {"\\boxed{2}"}
        ok = InProcesses(reward_workers.pid_factory(None), pool, "reward function 'pid_pure'")
        assert ok(Sample()).result(timeout=120) == 1.0
    finally:
        pool.close()
    assert RewardProcesses(1).warm([]) == []  # nothing to warm: no pool started


def test_a_promise_the_function_cannot_keep_is_refused_naming_the_record() -> None:
    with pytest.raises(ValueError, match=r"reward function 'x' \(plugin 'p'\) declares "
                                         r"extra\['processes'\] = True, but its built function "
                                         r"cannot be sent to a worker process"):
        InProcesses(lambda s: 1.0, RewardProcesses(1), "reward function 'x' (plugin 'p')")


_SCRIPT = """
from slime_core.rewards.routing import RewardFunctions
from slime_core.testing import build_test_config

def main():
    rf = RewardFunctions(None, build_test_config(rollout={{"reward_processes": 2}}))
    print("workers", 0 if rf.processes is None else rf.processes.workers)
{call}
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_without_a_main_guard_keeps_the_rewards_on_the_thread(tmp_path, guarded) -> None:
    """Spawned workers import the parent's main script: one without the guard would run its
    training again in each of them, so no worker is started and the user is told why."""
    import subprocess
    import sys

    call = 'if __name__ == "__main__":\n    main()' if guarded else "main()"
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT.format(call=call))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    if guarded:
        assert "workers 2" in res.stdout and "guard" not in res.stderr
    else:
        assert "workers 0" in res.stdout
        assert f"{script} has no `if __name__ == \"__main__\":` guard" in res.stderr


def test_the_run_end_stops_the_reward_workers(tmp_path, tokenizer_dir, monkeypatch) -> None:
    """The executor's shutdown closes the rollout manager's pool: a process that runs several
    trainings (a notebook, a sweep) keeps no idle workers of the finished ones."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.rollout.manager import RolloutManager
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    pools: list[RewardProcesses] = []
    close = RolloutManager.close

    def spy(self: RolloutManager) -> None:
        pools.append(self._rewards.processes)
        close(self)

    data = tiny_run(tmp_path, tokenizer_dir, run={"plugin_modules": ["tests.reward_workers"],
                                                  "num_rollouts": 1},
                    rollout={"reward": "pid_pure", "reward_processes": 2}, eval={"interval": 0})
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), data=data)
    monkeypatch.setattr(RolloutManager, "close", spy)
    run_dir = run_training(manager, config)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/reward_mean"] for r in rows if "rollout/reward_mean" in r] == [1.0]
    assert len(pools) == 1 and pools[0] is not None and pools[0]._pool is None


def _spy_start_order(monkeypatch, module, fails: bool
                     ) -> tuple[list[RewardProcesses], list[bool]]:
    """Spies on the reward pools warmed and on ``module.make_data_source``: the lists get
    each warmed pool, and for each data source made whether a warmed pool had started by
    then; with ``fails`` making a data source raises."""
    warmed: list[RewardProcesses] = []
    seen_at_data: list[bool] = []
    warm, make = RewardProcesses.warm, module.make_data_source

    def spy_warm(self: RewardProcesses, fns: list) -> list:
        warmed.append(self)
        return warm(self, fns)

    def spy_data(*args, **kwargs):
        seen_at_data.append(bool(warmed) and warmed[0]._pool is not None)
        if fails:
            raise ValueError("data.path: a bad file")
        return make(*args, **kwargs)

    monkeypatch.setattr(RewardProcesses, "warm", spy_warm)
    monkeypatch.setattr(module, "make_data_source", spy_data)
    return warmed, seen_at_data


@pytest.mark.parametrize("fails", [False, True], ids=["runs", "data_fails"])
def test_the_local_executor_starts_the_workers_before_its_set_up(tmp_path, tokenizer_dir,
                                                                 monkeypatch, fails) -> None:
    """The workers start importing their checkers first in the local executor's set-up,
    beside the data's and the models' loading (not after them, where the first evaluation
    waited for the workers' imports); a set-up that fails after they started stops them."""
    from slime_core.executors import local
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    warmed, seen_at_data = _spy_start_order(monkeypatch, local, fails)
    data = tiny_run(tmp_path, tokenizer_dir, run={"plugin_modules": ["tests.reward_workers"],
                                                  "num_rollouts": 1},
                    rollout={"reward": "pid_pure", "reward_processes": 2}, eval={"interval": 0})
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), data=data)
    if fails:
        with pytest.raises(ValueError, match="a bad file"):
            run_training(manager, config)
    else:
        run_training(manager, config)
    assert seen_at_data[0] is True and len(warmed) == 1
    assert warmed[0]._pool is None  # stopped: at the run's end, or when the set-up failed


@pytest.mark.parametrize("fails", [False, True], ids=["runs", "data_fails"])
def test_the_ray_rollout_worker_starts_the_workers_before_its_data(tmp_path, tokenizer_dir,
                                                                   monkeypatch, fails) -> None:
    """The Ray executor's rollout-manager actor (its class, built here without Ray) starts
    the reward workers before it reads the data, as the local executor; a data failure
    stops them."""
    from slime_core.executors.ray_workers import RolloutManagerWorker
    from slime_core.pluginmgr import PluginSelection
    from slime_core.rollout import components
    from slime_core.session import resolve

    warmed, seen_at_data = _spy_start_order(monkeypatch, components, fails)
    data = tiny_run(tmp_path, tokenizer_dir, run={"plugin_modules": ["tests.reward_workers"]},
                    rollout={"reward": "pid_pure", "reward_processes": 2}, eval={"interval": 0})
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), data=data)
    if fails:
        with pytest.raises(ValueError, match="a bad file"):
            RolloutManagerWorker(manager.snapshot(), config, [])
    else:
        RolloutManagerWorker(manager.snapshot(), config, []).rollouts.close()
    assert seen_at_data == [True] and len(warmed) == 1
    assert warmed[0]._pool is None
