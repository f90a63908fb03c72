"""One-step-off asynchronous rollouts (``run.async_rollout``) with the local executor.

The same pipeline runs under the ray executor (``tests/test_ray_executor.py``); here a slow
reward and a slow training step make the overlap measurable without Ray.
"""

from __future__ import annotations

import threading
import time
import warnings

import pytest
from slime_hookspecs import hookimpl

from tests.conftest import read_metrics, reward_record


class Timeline:
    """Rewards take 0.15 s each (rollout side), each optimizer step 1 s (trainer side)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, float]] = []
        self.lock = threading.Lock()

    def _add(self, what: str, step: int) -> None:
        with self.lock:
            self.events.append((what, step, time.monotonic()))

    def reward(self, sample):
        self._add("reward", sample.rollout_id)
        time.sleep(0.15)
        return float(sample.index % 2)

    @hookimpl
    def slime_register_reward_functions(self):
        return reward_record("timeline", self.reward)

    @hookimpl
    def slime_before_rollout(self, config, rollout_id):
        self._add("before_rollout", rollout_id)

    @hookimpl
    def slime_before_train(self, config, rollout_id):
        self._add("before_train", rollout_id)

    @hookimpl
    def slime_before_train_step(self, config, rollout_id, step_id, model, optimizer, scheduler):
        time.sleep(1.0)

    @hookimpl
    def slime_after_train(self, config, rollout_id, metrics):
        self._add("after_train", rollout_id)

    @hookimpl
    def slime_before_weight_sync(self, config, version):
        self._add("sync", version)

    @hookimpl
    def slime_log_rollout(self, config, rollout_id, samples, metrics):
        self._add("versions:" + ",".join(str(v) for s in samples for v in s.weight_versions),
                  rollout_id)


def test_generation_of_next_step_overlaps_training(base_config, run_slime) -> None:
    base_config["run"].update(num_rollouts=3, async_rollout=True, max_staleness=1)
    base_config["rollout"]["reward"] = "timeline"
    tl = Timeline()
    m = read_metrics(run_slime(base_config, [tl]))
    ev = tl.events
    t = {(w, s): ts for w, s, ts in ev if not w.startswith(("reward", "versions"))}
    # rollout 1 is submitted before step 0 trains, and its rewards run while step 0 trains
    assert t[("before_rollout", 1)] < t[("before_train", 0)]
    during = [ts for w, s, ts in ev if w == "reward" and s == 1
              and t[("before_train", 0)] < ts < t[("after_train", 0)]]
    assert during, "no generation of step 1 happened while step 0 trained"
    # weights never change in the middle of a generation: every reward of rollout k+1 comes
    # before the sync of version k+1, and each step's samples share one version
    for k in (1, 2):
        last_reward = max(ts for w, s, ts in ev if w == "reward" and s == k)
        assert last_reward < t[("sync", k)]
    versions = {s: w for w, s, _ in ev if w.startswith("versions")}
    assert versions == {0: "versions:" + ",".join(["0"] * 8),
                        1: "versions:" + ",".join(["0"] * 8),
                        2: "versions:" + ",".join(["1"] * 8)}
    assert [x["rollout/staleness_max"] for x in m] == [0.0, 1.0, 1.0]
    assert [x["rollout/stale_dropped"] for x in m] == [0.0, 0.0, 0.0]
    # the wait for the next step's generation before a sync is the rollout's, apart from the sync
    for x in m:
        assert x["perf/rollout_drain_time"] >= 0.0 and x["perf/weight_sync_time"] >= 0.0


def test_a_staleness_bound_the_schedule_cannot_meet_fails_at_start(base_config, run_slime) -> None:
    base_config["run"].update(async_rollout=True, max_staleness=0)
    with pytest.raises(ValueError, match="run.max_staleness = 0, but with weights.update_interval = 1"):
        run_slime(base_config)


def test_async_without_a_mismatch_correction_warns(base_config, run_slime) -> None:
    base_config["run"].update(num_rollouts=1, async_rollout=True)
    with pytest.warns(UserWarning, match='set algorithm.is_correction = "tis"'):
        run_slime(base_config)


def test_async_with_tis_does_not_warn(base_config, run_slime) -> None:
    base_config["run"].update(num_rollouts=1, async_rollout=True)
    base_config["algorithm"] = {"is_correction": "tis"}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        m = read_metrics(run_slime(base_config))
    assert not [w for w in seen if "is_correction" in str(w.message)]
    assert "train/tis" in m[0]  # the correction ran


class CrashAfterSave:
    """Ends the process's run right after the checkpoint of ``step`` is written."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def slime_after_save(self, config, rollout_id, path):
        if rollout_id == self.step:
            raise KeyboardInterrupt(f"simulated crash after saving step {rollout_id}")


def test_resume_after_a_crash_reproduces_the_uninterrupted_async_run(
        base_config, run_slime, tmp_path) -> None:
    from pathlib import Path

    base_config["run"].update(num_rollouts=4, save_interval=2, async_rollout=True,
                              max_staleness=1)
    base_config["rollout"]["temperature"] = 1.0
    straight = run_slime({**base_config, "run": {**base_config["run"], "run_dir": str(tmp_path / "a")}})

    crashed = {**base_config, "run": {**base_config["run"], "run_dir": str(tmp_path / "b")}}
    with pytest.raises(KeyboardInterrupt, match="simulated crash"):
        run_slime(crashed, [CrashAfterSave(2)])
    ckpt = Path(tmp_path / "b" / "checkpoints" / "step_000002")
    assert (ckpt / "inflight" / "rollout_000002.jsonl").is_file()  # generated by version 1
    run_slime(crashed, [CrashAfterSave(-1)], resume=str(tmp_path / "b"))  # same plugin set

    a = {m["step"]: m for m in read_metrics(straight)}
    b = {m["step"]: m for m in read_metrics(tmp_path / "b")}
    assert sorted(b) == [1, 2, 3, 4]  # step 2's row is written before its checkpoint
    for step in (2, 3, 4):  # step 3 trains on the in-flight rollout the checkpoint kept
        for key in ("rollout/reward_mean", "rollout/response_length_mean", "train/loss",
                    "train/grad_norm", "rollout/staleness_max"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-5, abs=1e-6), (step, key)
