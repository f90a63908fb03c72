"""Built-in plugin ``core_filters``: ``nonzero_std``, ``fifo``, ``lifo``, ``drop_truncated``.

A filter record's ``factory`` is the filter function itself (its arguments include the
config); ``stage`` says which config key may name it.
"""

from __future__ import annotations

from slime_core.filters import drop_truncated, fifo, lifo, nonzero_std
from slime_hookspecs import FilterRecord, hookimpl


@hookimpl
def slime_register_filters() -> list[FilterRecord]:
    return [
        FilterRecord(
            name="nonzero_std", factory=nonzero_std, stage="dynamic_sampling",
            summary="DAPO: drop groups whose rewards are all equal (reason zero_std)",
        ),
        FilterRecord(
            name="fifo", factory=fifo, stage="buffer",
            summary="hand out returned groups oldest first (default)",
        ),
        FilterRecord(
            name="lifo", factory=lifo, stage="buffer",
            summary="hand out returned groups newest first",
        ),
        FilterRecord(
            name="drop_truncated", factory=drop_truncated, stage="sample",
            summary="leave samples that hit max_new_tokens out of the loss",
        ),
    ]
