"""Built-in filters: dynamic sampling (``nonzero_std``), buffer (``fifo``, ``lifo``) and
sample (``drop_truncated``). A ``FilterRecord``'s ``factory`` is the filter function itself."""

from __future__ import annotations

from slime_std.filters.buffer import BUFFER_FILTERS, fifo, lifo
from slime_std.filters.dynamic import group_rewards, nonzero_std
from slime_std.filters.sample import drop_truncated

__all__ = ["BUFFER_FILTERS", "drop_truncated", "fifo", "group_rewards", "lifo", "nonzero_std"]
