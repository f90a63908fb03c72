"""Fault tolerance of the ray executor: a killed engine process and a crashed trainer rank.

Select with ``-m ray``. One local Ray instance serves the module (``ray_session``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from slime_hookspecs import hookimpl

from tests.conftest import read_metrics
from tests.ray_support import ray_config, ray_session, run  # noqa: F401

pytestmark = pytest.mark.ray


class Samples:
    """Driver-side: each step's sample indices and weight versions."""

    def __init__(self) -> None:
        self.indices: dict[int, list[int]] = {}
        self.versions: dict[int, list[int]] = {}

    @hookimpl
    def slime_log_rollout(self, config, rollout_id, samples, metrics):
        self.indices[rollout_id] = [s.index for s in samples]
        self.versions[rollout_id] = [v for s in samples for v in s.weight_versions]


def _pid(marker: Path) -> int:
    return int(marker.name.split("-")[2])  # gen-v<version>-<pid>-<n>


@pytest.mark.parametrize("delta", ["off", "xor"])
def test_killed_engine_is_restarted_resynced_and_its_requests_requeued(
        ray_session, base_config, tmp_path: Path, delta: str) -> None:  # noqa: F811
    markers = tmp_path / "markers"
    markers.mkdir()
    cfg = ray_config(
        base_config,
        run={"num_rollouts": 3, "fault_tolerance": True},
        rollout={"engine": "slow_local", "reward": "digit_fraction"},
        ray={"health_check_interval_s": 0.5},
        weights={"transport": "disk", "verify": True, "delta": delta},
        ray_test={"marker_dir": str(markers), "delay_s": 1.0},
    )
    killed: list[int] = []

    def kill_during_rollout_1() -> None:
        # the engine announces each generate and then waits delay_s: kill it in that window,
        # in the rollout of step 1 (weights version 1), so the restart must re-sync version 1
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            found = sorted(markers.glob("gen-v1-*"))
            if found:
                pid = _pid(found[0])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_during_rollout_1, daemon=True)
    killer.start()
    seen = Samples()
    m = read_metrics(run(cfg, [seen]))
    killer.join(timeout=1)
    assert killed, "the engine was never seen generating with weight version 1"
    assert [x["step"] for x in m] == [1, 2, 3]
    # same number of samples, none counted twice, the killed step's requests re-queued on the
    # restarted engine, which served them with the current weights (version 1)
    assert [x["rollout/samples"] for x in m] == [8.0, 8.0, 8.0]
    assert [x["rollout/engine_restarts"] for x in m] == [0.0, 1.0, 0.0]
    assert all(len(set(ix)) == 8 for ix in seen.indices.values())
    assert seen.versions == {0: [0] * 8, 1: [1] * 8, 2: [2] * 8}
    assert all(x["perf/weight_sync_verified"] == 1.0 for x in m)
    pids = {_pid(p) for p in markers.glob("gen-*")}
    assert killed[0] in pids and len(pids) == 2  # a new process took over
    if delta != "off":
        # the restarted process holds no base for the next delta: it refuses it, and the
        # transport resyncs it with a full version (the other syncs are deltas)
        assert [x["perf/weight_sync_resyncs"] for x in m] == [0.0, 1.0, 0.0]
        assert [x["perf/weight_sync_delta"] for x in m] == [1.0, 1.0, 1.0]


def test_trainer_rank_failure_keeps_last_checkpoint_and_resume_continues(
        ray_session, base_config, tmp_path: Path) -> None:  # noqa: F811
    marker = tmp_path / "crashed"
    cfg = ray_config(
        base_config,
        run={"num_rollouts": 3, "save_interval": 1},
        train={"num_ranks": 2},
        ray_test={"crash_rollout": 1, "crash_marker": str(marker)},
    )
    run_dir = Path(cfg["run"]["run_dir"])
    with pytest.raises(RuntimeError, match="train_step of rollout 1 .trainer ranks."):
        run(cfg)
    assert marker.exists()  # rank 1 did die at the training of step 2
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_000001"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step_")) == ["step_000001"]
    assert [x["step"] for x in read_metrics(run_dir)] == [1]
    run(cfg, resume=str(run_dir))
    assert [x["step"] for x in read_metrics(run_dir)] == [1, 2, 3]
    assert (ckpts / "latest").read_text().strip() == "step_000003"
