"""Durable file operations for the run directory, and the crash-test kill points.

A rename is only as durable as the data it points to and the directory entry that records it:
on a power loss (or a kernel crash) after ``os.replace`` returns, ext4/xfs may show the new
name over an empty or partial file unless the file was fsynced first, and may show the old
name unless the directory was fsynced after. Every rename that publishes run-directory state
(checkpoints, ``latest``, ``config.toml``, rewritten ``metrics.jsonl``) goes through here.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

FAULT_ENV = "SLIME_FAULT_KILL_AT"


def fsync_file(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Persist a directory's entries (created, renamed, removed names)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # a platform without directory fds (Windows): nothing to persist this way
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems (e.g. certain network mounts) refuse fsync on dirs
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file, then every directory bottom-up, below (and including) ``root``."""
    for dirpath, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            fsync_file(os.path.join(dirpath, name))
        fsync_dir(dirpath)


def atomic_write(path: str | Path, text: str) -> None:
    """Write via a temporary file, fsync, ``os.replace``, fsync the directory: readers (and a
    reboot) see the old content or the new one, never half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fault_point(name: str, step: int | None = None) -> None:
    """Crash-test hook: SIGKILL this process when ``SLIME_FAULT_KILL_AT`` is ``name`` or
    ``name:STEP`` (and ``step`` matches). Costs one environment lookup otherwise.

    Points: ``ckpt_written`` (files written, no marker yet), ``ckpt_marked`` (marker written,
    not renamed), ``ckpt_renamed`` (``step_N`` in place, ``latest`` not moved),
    ``ckpt_latest`` (``latest`` moved, old checkpoints not pruned), ``ckpt_pruning`` (an old
    checkpoint renamed away, not yet deleted), ``step_logged`` (the step's metrics row
    written, its checkpoint not started).
    """
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    point, _, at = spec.partition(":")
    if point == name and (not at or (step is not None and int(at) == step)):
        os.kill(os.getpid(), signal.SIGKILL)
