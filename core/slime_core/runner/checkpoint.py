"""Crash-safe checkpoints: a kill at any instant leaves the newest complete one usable.

Save, in this order (each step durable before the next: files and directories fsynced):

1. everything is written into ``checkpoints/.step_N.tmp-PID/`` (trainer files,
   ``data_source.json``, ``driver_state.json``);
2. the completeness marker ``COMPLETE`` is written last: a manifest of every file with its
   size and CRC-32;
3. the directory is renamed to ``step_N`` and ``checkpoints/latest`` is replaced;
4. checkpoints beyond ``run.keep_checkpoints`` are retired: renamed to
   ``.step_M.deleting-PID`` (one atomic step, so a half-deleted directory never carries a
   ``step_`` name) and then deleted (:func:`prune`; a start or resume prunes too, after
   :func:`remove_stale` may have promoted a marked temporary checkpoint).

Reading: a checkpoint is *complete* when its ``COMPLETE`` marker exists (no save or prune
of ours leaves a ``step_*`` directory without it, whenever it is killed). The newest complete
``step_*`` wins whatever ``latest`` says (a kill between step 3's rename and pointer update
leaves ``latest`` one behind); ``latest`` is a hint for people and tools. :func:`restore`
verifies every file against the manifest (presence, size, CRC-32) before loading and, when
the newest checkpoint is damaged, names the file and falls back to the previous intact one. Leftover
``.tmp-``/``.deleting-`` entries of a killed process are removed by :func:`remove_stale`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from slime_core.runtime.durable import atomic_write, fault_point, fsync_dir, fsync_tree

MARKER = "COMPLETE"
FORMAT = "slime.checkpoint"
T = TypeVar("T")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file."""


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def _step_of(path: Path) -> int | None:
    name = path.name
    if not name.startswith("step_"):
        return None
    try:
        return int(name[len("step_"):])
    except ValueError:
        return None


# -- writing -----------------------------------------------------------------------------------


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def _manifest(root: Path) -> dict[str, dict[str, int]]:
    files: dict[str, dict[str, int]] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if rel != MARKER:
                files[rel] = {"size": p.stat().st_size, "crc32": _crc32(p)}
    return dict(sorted(files.items()))


def _retire(path: Path, saving: int | None) -> None:
    """Remove a checkpoint directory (during the save of step ``saving``; ``None``: at a
    start or resume) so that no crash leaves it looking complete."""
    gone = path.with_name(f".{path.name}.deleting-{os.getpid()}")
    os.replace(path, gone)
    fsync_dir(path.parent)
    if saving is not None:
        fault_point("ckpt_pruning", saving)
    shutil.rmtree(gone, ignore_errors=True)


def prune(run_dir: Path, keep: int, saving: int | None = None) -> list[str]:
    """Retire the complete checkpoints older than the newest ``keep`` (``run.keep_checkpoints``;
    0 keeps every one); the names retired, oldest first. A save calls it after publishing its
    checkpoint; a start or resume calls it too, since a checkpoint promoted by
    :func:`remove_stale` (a kill between its marker and its rename) was never pruned after."""
    if keep <= 0:
        return []
    old = complete_checkpoints(run_dir)[:-keep]
    for path in old:
        _retire(path, saving)
    return [p.name for p in old]


def _promotable(tmp: Path, root: Path) -> Path | None:
    """``step_N`` for a ``.step_N.tmp-PID`` directory whose save got as far as its marker
    while no ``step_N`` exists (a kill between the marker and the rename), else ``None``."""
    name = tmp.name[1:].split(".tmp-", 1)[0]
    final = root / name
    if _step_of(final) is None or final.exists() or not (tmp / MARKER).is_file():
        return None
    try:
        check_complete(tmp)
    except CheckpointError:
        return None
    return final


def remove_stale(run_dir: Path) -> list[str]:
    """Clean up what a killed save or prune left behind (``.step_N.tmp-PID``,
    ``.latest.tmp-PID``, ``.step_N.deleting-PID``, run-directory ``.*.tmp-PID`` files).

    A temporary checkpoint that already has its marker, with no ``step_N`` beside it, is
    complete: it is renamed into place instead of deleted. Only one process drives a run
    directory, so everything else is garbage by the time a run starts, resumes or saves.
    Returns what was done, one entry per name."""
    done = []
    promoted = False
    root = run_dir / "checkpoints"
    for folder in (run_dir, root):
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            if not (p.name.startswith(".") and (".tmp-" in p.name or ".deleting-" in p.name)):
                continue
            if folder == root and p.is_dir() and (final := _promotable(p, root)) is not None:
                os.replace(p, final)
                done.append(f"{p.name} (complete: renamed to {final.name})")
                promoted = True
            elif p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
                done.append(p.name)
            else:
                p.unlink(missing_ok=True)
                done.append(p.name)
    if done:
        for folder in (run_dir, root):
            if folder.is_dir():
                fsync_dir(folder)
    if promoted and (newest := latest_checkpoint(run_dir)) is not None:
        # the killed save never got to its pointer update
        atomic_write(root / "latest", newest.name + "\n")
    return sorted(done)


def save_checkpoint(run_dir: Path, step: int, write: Callable[[Path], None],
                    driver_state: dict[str, Any], keep: int) -> Path:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        root.mkdir()
        fsync_dir(run_dir)
    remove_stale(run_dir)
    final = root / step_name(step)
    tmp = root / f".{step_name(step)}.tmp-{os.getpid()}"
    tmp.mkdir()
    write(tmp)
    atomic_write(tmp / "driver_state.json", json.dumps(driver_state))
    fsync_tree(tmp)  # the trainer's files are on disk before the marker says they are
    fault_point("ckpt_written", step)
    marker = {"format": FORMAT, "version": 1, "step": step, "files": _manifest(tmp)}
    atomic_write(tmp / MARKER, json.dumps(marker, indent=1) + "\n")
    fault_point("ckpt_marked", step)
    old_self = None
    if final.exists():  # the same step saved again: move it aside, then the new one in
        old_self = final.with_name(f".{final.name}.deleting-{os.getpid()}")
        os.replace(final, old_self)  # a kill now leaves the marked temp dir: promoted later
    os.replace(tmp, final)
    fsync_dir(root)
    if old_self is not None:
        shutil.rmtree(old_self, ignore_errors=True)
    fault_point("ckpt_renamed", step)
    atomic_write(root / "latest", final.name + "\n")
    fault_point("ckpt_latest", step)
    prune(run_dir, keep, step)
    return final


# -- reading -----------------------------------------------------------------------------------


def _read_marker(ckpt: Path) -> dict[str, Any]:
    path = ckpt / MARKER
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (the checkpoint is incomplete)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable ({exc})") from exc
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
        raise CheckpointError(f"{path}: not a slime checkpoint manifest")
    return marker


def check_complete(ckpt: Path, crc: bool = False) -> None:
    """Raise :class:`CheckpointError` naming the first missing, resized (or, with ``crc``,
    altered) file of ``ckpt``."""
    marker = _read_marker(ckpt)
    for rel, meta in marker["files"].items():
        p = ckpt / rel
        try:
            size = p.stat().st_size
        except OSError:
            raise CheckpointError(f"{p}: missing") from None
        if size != meta.get("size"):
            raise CheckpointError(f"{p}: {size} bytes, the checkpoint recorded {meta.get('size')}")
        if crc and "crc32" in meta and _crc32(p) != meta["crc32"]:
            raise CheckpointError(f"{p}: content changed since it was saved (CRC-32 mismatch)")


def _step_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    steps = [(s, p) for p in root.iterdir() if p.is_dir() and (s := _step_of(p)) is not None]
    return [p for _, p in sorted(steps)]


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """``step_*`` checkpoints with their completeness marker, oldest first (whether their
    files are intact is :func:`check_complete`'s question)."""
    return [p for p in _step_dirs(run_dir) if (p / MARKER).is_file()]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint (by step number; ``latest`` may lag behind it)."""
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def read_json(path: Path) -> Any:
    """A checkpoint's JSON file; errors name the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from exc


def read_driver_state(ckpt: Path) -> dict[str, Any]:
    state = read_json(ckpt / "driver_state.json")
    if not isinstance(state, dict) or "step" not in state:
        raise CheckpointError(f"{ckpt / 'driver_state.json'}: no driver state in it")
    return state


def restore(run_dir: Path, load: Callable[[Path], T]) -> tuple[Path, T] | None:
    """``load`` the newest intact checkpoint; ``None`` when the run has none.

    A checkpoint whose files fail verification or whose ``load`` raises is reported on stderr
    (naming the file) and the previous one is tried. ``load`` must set every piece of state
    it touches, so a failed attempt leaves nothing behind that the next one keeps. Raises
    :class:`CheckpointError` listing every failure when no checkpoint loads."""
    root = run_dir / "checkpoints"
    candidates = list(reversed(complete_checkpoints(run_dir)))
    for p in _step_dirs(run_dir):
        if p not in candidates:  # not written by this version, or taken apart by hand
            print(f"warning: ignoring {p}: it has no {MARKER} marker (an incomplete "
                  "checkpoint)", file=sys.stderr)
    failures: list[str] = []
    for i, ckpt in enumerate(candidates):
        try:
            check_complete(ckpt, crc=True)
            return ckpt, load(ckpt)
        except Exception as exc:  # noqa: BLE001 - any damage: report it, try the previous one
            why = str(exc) if isinstance(exc, CheckpointError) else (
                f"{ckpt}: loading failed ({type(exc).__name__}: {exc})")
            failures.append(why)
            nxt = candidates[i + 1].name if i + 1 < len(candidates) else None
            then = f"falling back to {nxt}" if nxt else "no older checkpoint to fall back to"
            print(f"warning: checkpoint {ckpt.name} is damaged: {why}; {then}", file=sys.stderr)
    if failures:
        raise CheckpointError(f"no intact checkpoint in {root}: " + "; ".join(failures))
    return None

