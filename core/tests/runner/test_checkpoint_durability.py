"""Checkpoint files on disk: fsync before the renames, the newest complete checkpoint, the
metrics rows a resume keeps (no model: the trainer's files are stand-ins)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from slime_core.runner import checkpoint as ckpt
from slime_core.runner.rundir import atomic_write


def _writer(payload: bytes):  # noqa: ANN202
    def write(tmp: Path) -> None:
        (tmp / "trainer").mkdir()
        (tmp / "trainer" / "model.bin").write_bytes(payload)
        (tmp / "data_source.json").write_text("{}")
    return write


def _save(run_dir: Path, step: int, keep: int = 3) -> Path:
    return ckpt.save_checkpoint(run_dir, step, _writer(bytes([step]) * 64), {"step": step}, keep)


def test_newest_complete_checkpoint_wins_over_a_stale_latest(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    # a kill between step_2's rename and the pointer's update leaves `latest` one behind
    atomic_write(tmp_path / "checkpoints" / "latest", "step_000001\n")
    assert ckpt.latest_checkpoint(tmp_path).name == "step_000002"


def test_save_fsyncs_every_file_and_directory_before_publishing(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    synced: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    final = _save(tmp_path, 1)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    files = {p.relative_to(final).as_posix() for p in final.rglob("*")}
    assert files == {"trainer", "trainer/model.bin", "data_source.json", "driver_state.json",
                     "COMPLETE"}
    for rel in files:  # each synced inside the temporary directory, i.e. before its rename
        p = tmp / rel
        written_as = p.with_name(f".{p.name}.tmp-{os.getpid()}")  # atomic_write's own temp
        assert str(p) in synced or str(written_as) in synced, rel
    assert str(tmp) in synced
    root = tmp_path / "checkpoints"
    assert synced.count(str(root)) >= 2  # after the rename and after `latest`
    assert str(root / "latest") in synced or any(s.startswith(str(root / ".latest.tmp-"))
                                                 for s in synced)


def test_marker_is_written_last_and_lists_every_file(tmp_path: Path) -> None:
    final = _save(tmp_path, 4)
    marker = json.loads((final / ckpt.MARKER).read_text())
    assert marker["step"] == 4
    assert sorted(marker["files"]) == ["data_source.json", "driver_state.json", "trainer/model.bin"]
    assert marker["files"]["trainer/model.bin"]["size"] == 64


def test_damaged_checkpoint_is_named_and_the_previous_one_loaded(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture
                                                                 ) -> None:
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    (newest / "trainer" / "model.bin").unlink()  # taken apart by hand, or a bad disk
    loaded, state = ckpt.restore(tmp_path, ckpt.read_driver_state)
    assert loaded.name == "step_000001" and state == {"step": 1}
    err = capsys.readouterr().err
    assert f"checkpoint step_000002 is damaged: {newest / 'trainer' / 'model.bin'}: missing" in err
    assert "falling back to step_000001" in err


def test_no_intact_checkpoint_is_one_error_naming_each_file(tmp_path: Path) -> None:
    first = _save(tmp_path, 1)
    (first / "data_source.json").write_text("{}x")  # resized
    with pytest.raises(ckpt.CheckpointError, match="data_source.json: 3 bytes, the checkpoint "
                                                   "recorded 2"):
        ckpt.restore(tmp_path, ckpt.read_driver_state)


def test_remove_stale_deletes_what_killed_saves_left(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    root = tmp_path / "checkpoints"
    (root / ".step_000002.tmp-999").mkdir()
    (root / ".step_000002.tmp-999" / "x").write_text("half")
    (root / ".step_000000.deleting-999").mkdir()
    (root / ".latest.tmp-999").write_text("step_000002")
    (tmp_path / ".config.toml.tmp-999").write_text("")
    assert ckpt.remove_stale(tmp_path) == [".config.toml.tmp-999", ".latest.tmp-999",
                                           ".step_000000.deleting-999", ".step_000002.tmp-999"]
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000001"]


def test_jsonl_rewind_keeps_one_row_per_step_up_to_the_checkpoint(tmp_path: Path) -> None:
    from slime_std.observe.loggers import JsonlLogger

    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "v": s} for s in (0, 1, 2, 3, 2, 3, 4)]  # an old duplicate of 2 and 3
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 5, "v"')  # cut off
    logger = JsonlLogger(None, str(tmp_path))
    logger.rewind(2)
    logger.log({"v": 30.0}, 3)
    logger.close()
    kept = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["step"] for r in kept] == [0, 1, 2, 3] and kept[-1]["v"] == 30.0
    aside = [json.loads(x)["step"] for x in (tmp_path / "metrics.superseded.jsonl").read_text()
             .splitlines()]
    assert aside == [3, 3, 4]


def test_a_marked_temporary_checkpoint_is_promoted_not_deleted(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    root = tmp_path / "checkpoints"
    # a kill after the marker of step 2 was written and before the rename
    os.replace(_save(tmp_path, 2), root / ".step_000002.tmp-999")
    assert ckpt.remove_stale(tmp_path) == [
        ".step_000002.tmp-999 (complete: renamed to step_000002)"]
    assert ckpt.latest_checkpoint(tmp_path).name == "step_000002"


def test_saving_the_same_step_again_replaces_it(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    again = ckpt.save_checkpoint(tmp_path, 1, _writer(b"new"), {"step": 1}, 2)
    assert (again / "trainer" / "model.bin").read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000001"]
