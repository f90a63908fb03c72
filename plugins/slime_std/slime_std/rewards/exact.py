"""``exact``: 1.0 when the response equals the label, else 0.0."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample

from slime_std.rewards.text import cut_at_stop


def exact_reward(sample: Sample, stops: tuple[str, ...] = ()) -> float:
    """1.0 when the response, cut at the first stop string and stripped, equals
    ``str(label).strip()``; 0.0 otherwise and when the label is ``None``."""
    if sample.label is None:
        return 0.0
    answer = cut_at_stop(sample.response or "", stops).strip()
    return 1.0 if answer == str(sample.label).strip() else 0.0


def make_exact_reward(config: Any) -> Callable[[Sample], float]:
    """Record factory: stop strings from ``rollout.stop``."""
    return functools.partial(exact_reward, stops=tuple(config.rollout.stop))
