"""Fully-asynchronous rollouts under the ray executor, killed: an engine killed while the
generator is generating is restarted and re-synced (``run.fault_tolerance``), the round's
requests are sent again, and the run goes on; without fault tolerance the run ends naming the
engine; a crashed trainer rank ends the run, and ``--resume`` restores the generator's buffer
into the new rollout manager actor.

Select with ``-m ray``. One local Ray instance serves the module (``ray_session``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import read_metrics
from tests.ray_support import RAY_PLUGINS, ray_config, ray_session, run  # noqa: F401

pytestmark = pytest.mark.ray


def _config(base: dict[str, Any], markers: Path, **run_keys: Any) -> dict[str, Any]:
    cfg = ray_config(
        base,
        run={"num_rollouts": 3, "rollout_mode": "fully_async", "max_staleness": 2,
             "save_interval": 3, **run_keys},
        rollout={"engine": "slow_local", "reward": "digit_fraction"},
        data={"eval_path": ""},
        algorithm={"is_correction": "tis"},
        ray={"health_check_interval_s": 0.5},
        ray_test={"marker_dir": str(markers), "delay_s": 0.5},
    )
    # the trained groups of every step, for the no-group-twice-none-lost record
    cfg["run"]["plugin_modules"] = [RAY_PLUGINS, "tests.fully_async_record"]
    return cfg


def _kill_engine_generating_with(markers: Path, version: int,
                                 killed: list[int]) -> threading.Thread:
    """SIGKILL the engine process once it announces a generate with weight ``version`` (the
    ``slow_local`` engine writes ``gen-v<version>-<pid>-<n>`` and then waits ``delay_s``: the
    kill lands inside the generator's round)."""

    def kill() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            found = sorted(markers.glob(f"gen-v{version}-*"))
            if found:
                pid = int(found[0].name.split("-")[2])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.02)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


def _check_record(run_dir: Path, steps: int) -> None:
    """No group trained twice, none lost (the record of ``tests.fully_async_record``; a step
    that ran again after a resume counts with its last line)."""
    trained: dict[int, list[int]] = {}
    for line in (run_dir / "trained_groups.jsonl").read_text().splitlines():
        row = json.loads(line)
        trained[row["step"]] = row["groups"]
    assert sorted(trained) == list(range(steps))
    everything = [g for groups in trained.values() for g in groups]
    assert len(everything) == len(set(everything)) == steps * 2
    # every group the data source handed out is trained, buffered, in generation or back in
    # the data source, in exactly one of them, at the final checkpoint
    final = run_dir / "checkpoints" / f"step_{steps:06d}"
    source = json.loads((final / "data_source.json").read_text())
    held = json.loads((final / "fully_async.json").read_text())
    kept = [g[0]["group_index"] for part in ("buffer", "inflight") for g in held[part]]
    returned = [g[0]["group_index"] for g in source["buffer"]]
    assert sorted(everything + kept + returned) == list(range(source["next_group_index"]))


def test_engine_killed_mid_round_is_restarted_and_no_group_is_lost_or_trained_twice(
        ray_session, base_config, tmp_path: Path) -> None:  # noqa: F811
    markers = tmp_path / "markers"
    markers.mkdir()
    cfg = _config(base_config, markers, fault_tolerance=True)
    killed: list[int] = []
    killer = _kill_engine_generating_with(markers, 1, killed)
    run_dir = run(cfg)
    killer.join(timeout=1)
    assert killed, "the engine was never seen generating with weight version 1"
    m = read_metrics(run_dir)
    assert [x["step"] for x in m] == [1, 2, 3]
    assert sum(x["rollout/engine_restarts"] for x in m) == 1.0
    # the killed round's requests went again to the restarted engine: no sample failed
    assert all(x["rollout/failed"] == 0.0 and x["rollout/samples"] == 8.0 for x in m)
    pids = {int(p.name.split("-")[2]) for p in markers.glob("gen-*")}
    assert killed[0] in pids and len(pids) == 2  # a new engine process took over
    # ... with a seed of its own, not a replay of the first process's draws
    (new,) = pids - {killed[0]}
    seeds = {pid: {int(p.name.split("-")[2]) for p in markers.glob(f"seed-{pid}-*")}
             for pid in (killed[0], new)}
    assert seeds[new] and not seeds[new] & seeds[killed[0]]
    _check_record(run_dir, 3)


def test_without_fault_tolerance_an_engine_killed_mid_round_ends_the_run_naming_it(
        ray_session, base_config, tmp_path: Path) -> None:  # noqa: F811
    markers = tmp_path / "markers"
    markers.mkdir()
    cfg = _config(base_config, markers, fault_tolerance=False)
    killed: list[int] = []
    killer = _kill_engine_generating_with(markers, 1, killed)
    with pytest.raises(RuntimeError, match=r"fully-async generation failed: EngineLostError: "
                                           r"rollout engine 0 died .*run.fault_tolerance = true"):
        run(cfg)
    killer.join(timeout=1)
    assert killed


def test_trainer_rank_crash_and_resume_keep_the_buffer_record(
        ray_session, base_config, tmp_path: Path) -> None:  # noqa: F811
    marker = tmp_path / "crashed"
    cfg = _config(base_config, tmp_path, num_rollouts=2, save_interval=1)
    cfg["train"]["num_ranks"] = 2
    cfg["rollout"]["engine"] = "local"
    cfg["ray_test"] = {"crash_rollout": 1, "crash_marker": str(marker)}
    run_dir = Path(cfg["run"]["run_dir"])
    with pytest.raises(RuntimeError, match="train_step of rollout 1 .trainer ranks."):
        run(cfg)
    assert marker.exists()  # rank 1 did die at the training of step 2
    assert [x["step"] for x in read_metrics(run_dir)] == [1]
    held = json.loads((run_dir / "checkpoints" / "step_000001" / "fully_async.json").read_text())
    assert held["buffer"] or held["inflight"]  # the resumed run has groups to restore
    run(cfg, resume=str(run_dir))
    assert [x["step"] for x in read_metrics(run_dir)] == [1, 2]
    # the groups held at step 1's checkpoint went into the new rollout manager actor: lost
    # otherwise (handed out by the restored data source, never trained nor held again)
    _check_record(run_dir, 2)
