"""Checks of prompt rows beyond their syntax, and the report of every bad row of a file.

A row is bad when its prompt is empty (blank text, no messages) or, where the reward that will
score it needs a label, when the label is missing, empty, or not text or a number (a dict label
compared as text is never equal to an answer). Which reward needs a label is a property of its
record: ``RewardFunctionRecord(..., extra={"needs_label": True})`` (the built-in ``exact`` and
``math`` set it). The data source does not know the reward, so
:func:`slime_core.rollout.components.make_data_source` names it in :data:`LABEL_REQUIRED` while
the source is built.

Bad rows are collected, not raised one at a time: :class:`BadRows` gives one error naming how
many there are and the first few as ``file:line: why``; with ``data.skip_bad_rows = true`` the
source keeps the good rows and logs how many it skipped.
"""

from __future__ import annotations

import contextlib
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator

SHOWN = 5
"""How many bad rows an error or warning quotes."""

LABEL_REQUIRED: ContextVar[str | None] = ContextVar("slime_label_required", default=None)
"""Name of the reward that will score the rows being read when it needs a label, else None."""


@contextlib.contextmanager
def labels_required_by(reward: str | None) -> Iterator[None]:
    """Make sources built in this block check that rows have a usable label for ``reward``."""
    token = LABEL_REQUIRED.set(reward)
    try:
        yield
    finally:
        LABEL_REQUIRED.reset(token)


def row_problem(prompt: Any, label: Any, label_key: str) -> str | None:
    """Why a parsed row cannot be trained on, or ``None``."""
    if isinstance(prompt, str) and not prompt.strip():
        return "empty prompt"
    if isinstance(prompt, list) and not prompt:
        return "empty prompt (no messages)"
    reward = LABEL_REQUIRED.get()
    if reward is None:
        return None
    needs = f"reward {reward!r} needs one"
    if label is None:
        return f"no label ({label_key!r}, data.label_key); {needs}"
    if isinstance(label, bool) or not isinstance(label, (str, int, float)):
        return f"label is a {type(label).__name__}, not text or a number; {needs}"
    if isinstance(label, str) and not label.strip():
        return f"empty label; {needs}"
    return None


@dataclass
class BadRows:
    """The bad rows of one file: ``(reference, why)`` pairs, ``reference`` like ``x.jsonl:3``."""

    key: str  # the config key that named the file (data.path / data.eval_path)
    path: str
    rows: list[tuple[str, str]] = field(default_factory=list)

    def add(self, ref: str, why: str) -> None:
        self.rows.append((ref, why))

    def __len__(self) -> int:
        return len(self.rows)

    def _listing(self) -> str:
        shown = "\n".join(f"  {ref}: {why}" for ref, why in self.rows[:SHOWN])
        more = len(self.rows) - SHOWN
        return shown + (f"\n  ... and {more} more" if more > 0 else "")

    def error(self, total: int) -> ValueError:
        return ValueError(
            f"{self.key} file {self.path!r}: {len(self.rows)} bad row(s) of {total}: "
            f"{', '.join(_loc(ref) for ref, _ in self.rows[:SHOWN])}"
            f"{', ...' if len(self.rows) > SHOWN else ''} "
            f"(set data.skip_bad_rows = true to train on the others)\n{self._listing()}"
        )

    def warn(self, total: int) -> None:
        print(f"warning: {self.key} file {self.path!r}: skipped {len(self.rows)} bad row(s) of "
              f"{total} (data.skip_bad_rows)\n{self._listing()}", file=sys.stderr, flush=True)


def _loc(ref: str) -> str:
    """``"x.jsonl:3"`` -> ``"line 3"``; ``"x.parquet row 3"`` -> ``"row 3"``."""
    head, sep, tail = ref.rpartition(":")
    if sep and tail.isdigit():
        return f"line {tail}"
    return " ".join(ref.split()[-2:])
