"""The learning-rate schedule of ``[train]``, shared by every trainer backend so that a run's
learning rate does not depend on which backend trains it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def lr_schedule(config: Any) -> Callable[[int], float]:
    """The ``LambdaLR`` function of ``[train]``: linear warm-up over ``warmup_steps`` to
    ``train.lr``, then ``lr_decay`` (constant / linear / cosine) to ``min_lr`` at the run's last
    optimizer step (``run.num_rollouts * train.num_steps_per_rollout``)."""
    t = config.train
    total = max(1, config.run.num_rollouts * t.num_steps_per_rollout)
    floor = t.min_lr / t.lr if t.lr > 0 else 0.0

    def fn(step: int) -> float:
        if t.warmup_steps and step < t.warmup_steps:
            return (step + 1) / t.warmup_steps
        if t.lr_decay == "constant":
            return 1.0
        progress = min(1.0, (step - t.warmup_steps) / max(1, total - t.warmup_steps))
        if t.lr_decay == "linear":
            return floor + (1 - floor) * (1 - progress)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return fn
