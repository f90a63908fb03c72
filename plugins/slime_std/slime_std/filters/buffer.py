"""Buffer filters: which returned groups the data source hands out next.

Signature (``FilterRecord`` stage ``"buffer"``, same as the ``slime_buffer_filter`` hook):
``fn(config, rollout_id, buffer, num_groups) -> list of groups``. The filter removes the
groups it returns from ``buffer`` (in place) and returns at most ``num_groups`` of them; a
negative ``num_groups`` means all of them.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Sample


def _count(buffer: list[list[Sample]], num_groups: int) -> int:
    return len(buffer) if num_groups < 0 else min(num_groups, len(buffer))


def fifo(config: Any, rollout_id: int, buffer: list[list[Sample]],
         num_groups: int) -> list[list[Sample]]:
    """First in, first out: the oldest returned groups, oldest first (slime's default)."""
    n = _count(buffer, num_groups)
    taken = buffer[:n]
    del buffer[:n]
    return taken


def lifo(config: Any, rollout_id: int, buffer: list[list[Sample]],
         num_groups: int) -> list[list[Sample]]:
    """Last in, first out: the most recently returned groups, newest first (least stale
    partial rollouts go back to the engine first)."""
    n = _count(buffer, num_groups)
    if n == 0:
        return []
    taken = buffer[len(buffer) - n:]
    del buffer[len(buffer) - n:]
    taken.reverse()
    return taken


BUFFER_FILTERS = {"fifo": fifo, "lifo": lifo}
