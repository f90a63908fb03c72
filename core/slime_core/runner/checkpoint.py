"""Atomic checkpoints: a crash mid-save leaves the previous checkpoint intact.

A checkpoint is written into ``checkpoints/.step_N.tmp-PID`` and renamed to ``step_N`` only
when complete; ``checkpoints/latest`` is then replaced atomically. Old checkpoints beyond
``run.keep_checkpoints`` are removed after the new one is in place.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from slime_core.runner.rundir import atomic_write


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def save_checkpoint(run_dir: Path, step: int, write: Callable[[Path], None],
                    driver_state: dict[str, Any], keep: int) -> Path:
    root = run_dir / "checkpoints"
    root.mkdir(exist_ok=True)
    final = root / step_name(step)
    tmp = root / f".{step_name(step)}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    write(tmp)
    atomic_write(tmp / "driver_state.json", json.dumps(driver_state))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    atomic_write(root / "latest", final.name + "\n")
    complete = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint (``latest`` pointer, else the highest ``step_*``)."""
    root = run_dir / "checkpoints"
    pointer = root / "latest"
    if pointer.is_file():
        cand = root / pointer.read_text().strip()
        if (cand / "driver_state.json").is_file():
            return cand
    steps = sorted(p for p in root.glob("step_*") if (p / "driver_state.json").is_file())
    return steps[-1] if steps else None


def read_driver_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / "driver_state.json").read_text())
