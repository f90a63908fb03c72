"""The set-up's parts (``data``, ``trainer``, ``engines``, ``first_sync``, ``resume``): how a
run's time to its first step (:mod:`slime_core.runner.startup`) divides, as spans in the
trace's ``setup`` phase and ``perf/setup_<part>_time`` in the first row of ``metrics.jsonl``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from slime_core.observe import trace

_PARTS: dict[str, float] = {}  # set-up part -> seconds, this process


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
