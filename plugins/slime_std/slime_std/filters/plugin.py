"""Built-in plugin ``core_filters``: ``nonzero_std``, ``fifo``, ``lifo``, ``drop_truncated``.

Each record's ``factory(config)`` binds the run's config to the filter function (the
convention of every record: ``slime_hookspecs.records``); ``stage`` says which config key may
name it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from slime_hookspecs import Config, FilterRecord, Records

from slime_std.filters import drop_truncated, fifo, lifo, nonzero_std

records = Records()


def _bound(fn: Callable[..., Any]) -> Callable[[Any], Callable[..., Any]]:
    """``factory(config) -> fn(config, ...)`` with the config bound."""

    def build(config: Config) -> Callable[..., Any]:
        return partial(fn, config)

    build.__doc__ = f"``{fn.__name__}`` with the run's config bound."
    return build


records.add(FilterRecord(
    name="nonzero_std", factory=_bound(nonzero_std), stage="dynamic_sampling",
    summary="DAPO: drop groups whose rewards are all equal (reason zero_std)",
))
records.add(FilterRecord(
    name="fifo", factory=_bound(fifo), stage="buffer",
    summary="hand out returned groups oldest first (default)",
))
records.add(FilterRecord(
    name="lifo", factory=_bound(lifo), stage="buffer",
    summary="hand out returned groups newest first",
))
records.add(FilterRecord(
    name="drop_truncated", factory=_bound(drop_truncated), stage="sample",
    summary="leave samples that hit max_new_tokens out of the loss",
))

slime_register_filters = records.hook(FilterRecord)
