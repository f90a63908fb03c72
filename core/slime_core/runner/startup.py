"""Time to first step: how long a run takes from its process's start to its first trained step.

``perf/startup_time`` (in the first row a process writes to ``metrics.jsonl``, printed once)
counts from the moment the operating system started the process (imports, plugin loading,
model loading, engine and trainer set-up, the first weight sync, then the first step with
every compilation and CUDA-graph capture it triggers) to the end of that step's training and
weight sync. Evaluations are left out: their length is the user's choice of held-out set, and
a run without one starts no faster.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from slime_core.observe import trace

_IMPORTED = time.time()  # the fallback start where the process's own is unknown
_PARTS: dict[str, float] = {}  # set-up part -> seconds, this process


def process_start() -> float:
    """Wall-clock time (``time.time()``) at which this process started: from ``/proc`` on
    Linux, else the time this module was first imported (which misses the interpreter's and
    the earliest imports' share)."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
            # the command name (field 2) may hold spaces and parentheses: split after it
            fields = f.read().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
        return time.time() - uptime + started_ticks / ticks
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def startup_line(startup: float, setup: float, first_step: float) -> str:
    """The line printed once the first step is done."""
    return (f"time to first step: {startup:.1f} s (set-up {setup:.1f} s from process start, "
            f"first step {first_step:.1f} s; evaluation excluded) -> perf/startup_time")


@contextlib.contextmanager
def part(name: str) -> Iterator[None]:
    """Time one part of the set-up (``data``, ``trainer``, ``engines``, ...): a span on the
    trace's phase track (inside ``setup``) and ``perf/setup_<name>_time`` in the first row, so
    a slow start says where it went. Sequential code only (the phase track nests)."""
    t = time.perf_counter()
    try:
        with trace.span(name):
            yield
    finally:
        _PARTS[name] = _PARTS.get(name, 0.0) + time.perf_counter() - t


def reset() -> None:
    """Forget the parts timed so far (a driver starting in this process)."""
    _PARTS.clear()


def parts_metrics(before_driver: float) -> dict[str, float]:
    """The first row's break-down of ``perf/setup_time``: ``perf/setup_start_time`` (process
    start to the driver: the interpreter, imports, plugin discovery, the config) and the parts
    timed with :func:`part` since; consumed (a second driver in this process starts afresh)."""
    out = {"perf/setup_start_time": before_driver}
    out.update({f"perf/setup_{name}_time": sec for name, sec in _PARTS.items()})
    _PARTS.clear()
    return out
