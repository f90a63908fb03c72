"""Crash recovery of a run directory (issue 17, items 1, 3, 4, 5), through the real ``core run``
on the tiny arithmetic model, killed with SIGKILL at chosen points.

Two kinds of kill points: lifecycle hooks (``tests/crash_plugin.py``, which works against any
version of the driver) and the named points inside a checkpoint save
(``SLIME_FAULT_KILL_AT``, :func:`slime_core.runtime.durable.fault_point`).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from slime_hookspecs import hookimpl

from tests.cli_support import ARITH, core
from tests.conftest import read_metrics, reward_record

KILLED = -signal.SIGKILL


def _eval_file(tmp_path: Path) -> Path:
    path = tmp_path / "eval.jsonl"
    lines = (ARITH / "eval.jsonl").read_text().splitlines()[:6]
    path.write_text("\n".join(lines) + "\n")
    return path


def _start(run_dir: Path, num: int, save_interval: int, *, eval_path: Path | None = None,
           env: dict[str, str] | None = None, loggers: str = '["jsonl"]'):  # noqa: ANN202
    return core(
        "run", "--plugins", "slime_grpo", "--config", str(ARITH / "grpo.toml"),
        "-o", f'run.run_dir="{run_dir}"', "-o", f"run.num_rollouts={num}",
        "-o", f"run.save_interval={save_interval}", "-o", "run.progress=false",
        "-o", "run.num_threads=1", "-o", f"run.loggers={loggers}",
        "-o", 'run.plugin_modules=["tests.crash_plugin"]',
        "-o", "rollout.batch_size=2", "-o", "rollout.n_samples_per_prompt=4",
        "-o", f'data.eval_path="{eval_path or ""}"', "-o", "eval.interval=5",
        env=env,
    )


def _resume(run_dir: Path, *extra: str, env: dict[str, str] | None = None):  # noqa: ANN202
    return core("run", "--resume", str(run_dir), *extra, env=env)


def _steps(run_dir: Path) -> list[int]:
    return [m["step"] for m in read_metrics(run_dir)]


def _leftovers(run_dir: Path) -> list[str]:
    return sorted(p.name for d in (run_dir, run_dir / "checkpoints") if d.is_dir()
                  for p in d.iterdir() if ".tmp-" in p.name or ".deleting-" in p.name)


# -- item 1: the README's resume --------------------------------------------------------------


def test_resume_reuses_the_recorded_plugin_set(tmp_path: Path) -> None:
    """``core run --plugins slime_grpo ...`` then ``core run --resume RUN_DIR`` (autoload on,
    every plugin of the repo installed) continues the run and says which plugins it loads."""
    run_dir = tmp_path / "run"
    first = _start(run_dir, 1, 0)
    assert first.returncode == 0, first.stderr[-3000:]
    res = _resume(run_dir, "-o", "run.num_rollouts=2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resume: reusing the plugin set recorded in" in res.stderr
    assert "slime_grpo (slime-grpo" in res.stderr
    assert "plugin set changed" not in res.stderr
    assert _steps(run_dir) == [1, 2]


def test_resume_fails_naming_a_missing_recorded_plugin(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text((ARITH / "grpo.toml").read_text())
    recorded = [{"name": "core_config", "distribution": "slime-core", "version": "0.1.0",
                 "source": "builtin"},
                {"name": "slime_gone", "distribution": "slime-gone", "version": "1.2.3",
                 "source": "entry point"}]
    (run_dir / "plugins.json").write_text(json.dumps(recorded))
    res = _resume(run_dir)
    assert res.returncode == 1
    assert "recorded plugin slime_gone (slime-gone 1.2.3) is not installed" in res.stderr
    assert "Traceback" not in res.stderr


# -- item 3: one metrics row per step after a kill and a resume --------------------------------


@pytest.mark.parametrize("crash_at, saved", [
    # latest moved to step_000002, the driver killed right after the save
    ("slime_after_save:2", 2),
    # rows 1..3 written, the newest checkpoint is step 2: step 3 runs again
    ("slime_before_train:3", 2),
    # step 2's row written, its save not begun
    ("slime_before_save:2", 0),
])
def test_kill_and_resume_leave_one_row_per_step(tmp_path: Path, crash_at: str, saved: int) -> None:
    run_dir = tmp_path / "run"
    eval_path = _eval_file(tmp_path)
    res = _start(run_dir, 4, 2, eval_path=eval_path, loggers='["jsonl", "tensorboard"]',
                 env={"SLIME_TEST_CRASH_AT": crash_at})
    assert res.returncode == KILLED, res.stderr[-3000:]
    res = _resume(run_dir)
    assert res.returncode == 0, res.stderr[-3000:]
    expected = f"at step {saved} from step_{saved:06d}" if saved else "restarting it from step 0"
    assert expected in res.stderr
    assert _steps(run_dir) == [0, 1, 2, 3, 4]  # eval-only row 0, then one row per step
    rows = read_metrics(run_dir)
    assert "eval/accuracy" in rows[0] and "eval/accuracy" in rows[-1]
    # rows past the restored checkpoint are kept aside, not mixed into the record
    superseded = run_dir / "metrics.superseded.jsonl"
    if crash_at == "slime_before_train:3":
        assert [json.loads(x)["step"] for x in superseded.read_text().splitlines()] == [3]
    # TensorBoard: the resumed segment's event file purges the steps that ran again
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    files = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 2
    purges = [e.step for f in files for e in EventFileLoader(str(f)).Load()
              if e.HasField("session_log") and e.session_log.status == SessionLog.START]
    assert purges == [saved + 1 if saved else 0]


# -- item 4: a crash before the first checkpoint ----------------------------------------------


def test_crash_before_the_first_checkpoint_restarts_from_step_0(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    res = _start(run_dir, 3, 0, eval_path=_eval_file(tmp_path),
                 env={"SLIME_TEST_CRASH_AT": "slime_before_train:1"})
    assert res.returncode == KILLED, res.stderr[-3000:]
    assert _steps(run_dir) == [0, 1] and not (run_dir / "checkpoints").exists()
    again = _start(run_dir, 3, 0)  # the directory is not reused by a fresh start...
    assert again.returncode == 1 and "--resume" in again.stderr
    assert "from step 0 when it has none" in again.stderr
    res = _resume(run_dir)  # ...but it resumes from step 0
    assert res.returncode == 0, res.stderr[-3000:]
    assert "has no checkpoint" in res.stderr and "restarting it from step 0" in res.stderr
    assert _steps(run_dir) == [0, 1, 2, 3]
    assert (run_dir / "checkpoints" / "step_000003" / "COMPLETE").is_file()


class FailingReward:
    @hookimpl
    def slime_register_reward_functions(self):  # noqa: ANN201
        def unreachable(sample):  # noqa: ANN001, ANN202
            raise RuntimeError("verifier unreachable")

        return reward_record("unreachable", unreachable)


def test_a_run_failing_in_its_first_rollout_leaves_no_directory(base_config, run_slime,  # noqa: ANN001
                                                                 capsys) -> None:
    # issue 38: it was kept (and the same command refused) while a run failing on its data
    # was removed; neither trained anything, both are removed now (docs/run_directory.md)
    base_config["data"].pop("eval_path")
    run_dir = Path(base_config["run"]["run_dir"])
    with pytest.raises(RuntimeError, match="every sample of step 0 failed"):
        run_slime({**base_config, "rollout": {**base_config["rollout"], "reward": "unreachable"}},
                  [FailingReward()])
    assert not run_dir.exists()
    assert "the same command can run again" in capsys.readouterr().err
    # the same configuration, the cause fixed: not refused
    assert [r["step"] for r in read_metrics(run_slime(base_config))] == [1, 2]


# -- item 5: kills inside a save ---------------------------------------------------------------


@pytest.mark.parametrize("point, resumed_at, left", [
    # step_2 written in its temp dir, no marker: the temp dir is left, step 1 is resumed
    ("ckpt_written:2", 1, ".step_000002.tmp-"),
    # step_2 in place, `latest` still names step_1
    ("ckpt_renamed:2", 2, None),
    # step_1 renamed away for deletion, not yet deleted
    ("ckpt_pruning:3", 3, ".step_000001.deleting-"),
    # the last save marked complete, not renamed (issue 38): the resume promotes it, points
    # `latest` at it and prunes to run.keep_checkpoints although no save follows
    ("ckpt_marked:3", 3, ".step_000003.tmp-"),
])
def test_kill_inside_a_save(tmp_path: Path, point: str, resumed_at: int, left: str | None) -> None:
    run_dir = tmp_path / "run"
    res = _start(run_dir, 3, 1, env={"SLIME_FAULT_KILL_AT": point})
    assert res.returncode == KILLED, res.stderr[-3000:]
    ckpts = run_dir / "checkpoints"
    if left is None:
        assert (ckpts / "latest").read_text().strip() == "step_000001"  # stale
    else:
        assert [n for n in _leftovers(run_dir) if n.startswith(left)]
    res = _resume(run_dir)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"at step {resumed_at} from step_{resumed_at:06d}" in res.stderr
    assert _leftovers(run_dir) == []
    assert _steps(run_dir) == [1, 2, 3]
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step_")) == [
        "step_000002", "step_000003"]
    assert (ckpts / "latest").read_text().strip() == "step_000003"


def test_corrupt_checkpoint_is_named_and_the_previous_one_used(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    res = _start(run_dir, 2, 1)
    assert res.returncode == 0, res.stderr[-3000:]
    weights = run_dir / "checkpoints" / "step_000002" / "trainer" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    weights.write_bytes(bytes(data))
    res = _resume(run_dir, "-o", "run.num_rollouts=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"checkpoint step_000002 is damaged: {weights}" in res.stderr
    assert "falling back to step_000001" in res.stderr
    assert "at step 1 from step_000001" in res.stderr
    assert _steps(run_dir) == [1, 2, 3]
    # every checkpoint damaged: one line naming the file, no traceback
    for ckpt in (run_dir / "checkpoints").glob("step_*"):
        (ckpt / "driver_state.json").write_text("{not json")
    res = _resume(run_dir, "-o", "run.num_rollouts=4")
    assert res.returncode == 1
    assert "CheckpointError: no intact checkpoint in" in res.stderr
    assert "step_000003/driver_state.json" in res.stderr
    assert "Traceback" not in res.stderr


class _FailAt:
    """Raises at ``slime_before_train`` of one rollout (``None``: never)."""

    def __init__(self, rollout_id: int | None) -> None:
        self.rollout_id = rollout_id

    @hookimpl
    def slime_before_train(self, config, rollout_id):  # noqa: ANN001, ANN201
        if rollout_id == self.rollout_id:
            raise RuntimeError("crash in step")


def test_half_deleted_newest_checkpoint_falls_back(base_config, run_slime,  # noqa: ANN001
                                                   capsys: pytest.CaptureFixture) -> None:
    base_config["run"].update(num_rollouts=2, save_interval=1)
    run_dir = run_slime(base_config)
    gone = run_dir / "checkpoints" / "step_000002" / "trainer" / "trainer_state.pt"
    gone.unlink()
    base_config["run"]["num_rollouts"] = 3
    run_slime(base_config, resume=str(run_dir))
    err = capsys.readouterr().err
    assert f"checkpoint step_000002 is damaged: {gone}: missing" in err
    assert "resumed" in err and "at step 1 from step_000001" in err
    assert _steps(run_dir) == [1, 2, 3]


def test_resume_marks_the_superseded_spans_of_earlier_traces(base_config,  # noqa: ANN001
                                                             run_slime) -> None:
    base_config["run"].update(num_rollouts=3, save_interval=2)
    run_dir = Path(base_config["run"]["run_dir"])
    with pytest.raises(RuntimeError, match="crash in step"):
        run_slime(base_config, plugins=[_FailAt(2)])  # step 3 fails after checkpoint 2
    assert json.loads((run_dir / "trace.json").read_text())["otherData"]["status"] == "failed"
    run_slime(base_config, plugins=[_FailAt(None)], resume=str(run_dir))
    old = json.loads((run_dir / "trace.1.json").read_text())
    assert old["otherData"]["superseded_after_step"] == 2

    def superseded(name: str, rollout_id: int) -> list[bool]:
        return [bool(e["args"].get("superseded")) for e in old["traceEvents"]
                if e["ph"] == "X" and e["pid"] == 1 and e["name"] == name
                and e["args"].get("rollout_id") == rollout_id]

    assert superseded("train", 0) == superseded("train", 1) == [False]
    assert superseded("save", 2) == [False]
    assert superseded("rollout", 2) == [True]  # step 3 runs again in the resumed segment
    new = json.loads((run_dir / "trace.json").read_text())
    assert new["otherData"]["status"] == "completed"
    assert not any(e.get("args", {}).get("superseded") for e in new["traceEvents"])
    assert _steps(run_dir) == [1, 2, 3]


# -- fully-asynchronous rollouts: killed at any instant, nothing trained twice or lost ---------


@pytest.mark.parametrize("env, resumed_at", [
    # mid-step: the generator is filling the buffer while the driver is killed
    ({"SLIME_TEST_CRASH_AT": "slime_before_train:3"}, 2),
    # inside a save: the buffer's snapshot written, the checkpoint not marked complete
    ({"SLIME_FAULT_KILL_AT": "ckpt_written:4"}, 2),
])
def test_fully_async_kill_and_resume_keep_the_buffer_record(
        tmp_path: Path, env: dict[str, str], resumed_at: int) -> None:
    run_dir = tmp_path / "run"
    res = core(
        "run", "--plugins", "slime_grpo", "--config", str(ARITH / "grpo.toml"),
        "-o", f'run.run_dir="{run_dir}"', "-o", "run.num_rollouts=5",
        "-o", "run.save_interval=2", "-o", "run.progress=false", "-o", "run.num_threads=1",
        "-o", 'run.loggers=["jsonl"]', "-o", 'data.eval_path=""',
        "-o", 'run.plugin_modules=["tests.crash_plugin", "tests.fully_async_record"]',
        "-o", 'run.rollout_mode="fully_async"', "-o", "run.max_staleness=2",
        "-o", 'algorithm.is_correction="tis"',
        "-o", "rollout.batch_size=2", "-o", "rollout.n_samples_per_prompt=4",
        env=env,
    )
    assert res.returncode == KILLED, res.stderr[-3000:]
    res = _resume(run_dir)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"at step {resumed_at} from step_{resumed_at:06d}" in res.stderr
    assert _steps(run_dir) == [1, 2, 3, 4, 5]
    # the record: each step's groups as last written (steps after the restored checkpoint
    # ran twice; the resumed run's line is the one that counts)
    trained: dict[int, list[int]] = {}
    for line in (run_dir / "trained_groups.jsonl").read_text().splitlines():
        row = json.loads(line)
        trained[row["step"]] = row["groups"]
    assert sorted(trained) == [0, 1, 2, 3, 4]
    everything = [g for groups in trained.values() for g in groups]
    assert len(everything) == len(set(everything)) == 5 * 2  # no group trained twice
    # none lost: every group the data source handed out is trained, buffered, in generation
    # or back in the data source, in exactly one of them, at the final checkpoint
    final = run_dir / "checkpoints" / "step_000005"
    source = json.loads((final / "data_source.json").read_text())
    held = json.loads((final / "fully_async.json").read_text())
    kept = [g[0]["group_index"] for part in ("buffer", "inflight") for g in held[part]]
    returned = [g[0]["group_index"] for g in source["buffer"]]
    accounted = everything + kept + returned
    assert sorted(accounted) == list(range(source["next_group_index"]))


# -- run.save_at_end ---------------------------------------------------------------------------


@pytest.mark.parametrize("at_end, kept", [(True, ["step_000002", "step_000003"]),
                                          (False, ["step_000002"])])
def test_save_at_end_decides_the_last_steps_checkpoint(base_config, run_slime,  # noqa: ANN001
                                                       at_end: bool, kept: list[str]) -> None:
    """The last step is checkpointed unless ``run.save_at_end = false``; ``save_interval``'s
    checkpoints are written either way."""
    base_config["run"].update(num_rollouts=3, save_interval=2, save_at_end=at_end)
    base_config["data"].pop("eval_path")
    run_dir = run_slime(base_config)
    assert len(read_metrics(run_dir)) == 3
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == kept
