"""Time to first step: how long a run takes from its process's start to its first trained step.

``perf/startup_time`` (in the first row a process writes to ``metrics.jsonl``, printed once)
counts from the moment the operating system started the process (imports, plugin loading,
model loading, engine and trainer set-up, the first weight sync, then the first step with
every compilation and CUDA-graph capture it triggers) to the end of that step's training and
weight sync. Evaluations are left out: their length is the user's choice of held-out set, and
a run without one starts no faster.
"""

from __future__ import annotations

import os
import time

_IMPORTED = time.time()  # the fallback start where the process's own is unknown


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
