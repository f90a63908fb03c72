"""Sample filters: mark samples to leave out of the loss (``FilterRecord`` stage ``"sample"``):
``fn(config, groups) -> None``, setting ``sample.remove_sample``."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Sample, Status


def drop_truncated(config: Any, groups: list[list[Sample]]) -> None:
    """Set ``remove_sample = True`` on every TRUNCATED sample (hit ``max_new_tokens``).

    The sample still counts in its group's reward normalisation; only its loss is masked.
    """
    for group in groups:
        for s in group:
            if s.status == Status.TRUNCATED:
                s.remove_sample = True
