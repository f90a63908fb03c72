"""The driver's side of training health (:mod:`slime_core.trainkit.health`).

The trainer skips an optimizer step that would apply a non-finite update and says so in the
step's metrics (``train/skipped_steps``, ``train/nonfinite_<what>``). The driver then:

* keeps the weight version where it was when no optimizer step of the rollout was applied, so
  no weight sync is sent for it (the engines hold the same weights);
* prints the reason the first time it is seen (once per reason, not once per step);
* stops the run with :class:`TrainingHealthError` (a non-zero exit) when
  ``train.max_consecutive_skipped_steps`` steps in a row were skipped, naming the first of
  them and what went non-finite. The count starts again at a resume (it is not checkpointed).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from slime_core.trainkit.health import SKIPPED_STEPS, skip_reason


class TrainingHealthError(RuntimeError):
    """Too many consecutive training steps were skipped for non-finite values."""


class SkippedSteps:
    """Consecutive skipped training steps of one driver; ``limit`` is
    ``train.max_consecutive_skipped_steps``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.run: list[tuple[int, str]] = []  # (step, reason) of the current streak
        self._told: set[str] = set()

    def record(self, step: int, metrics: Mapping[str, float]) -> bool:
        """Take step ``step``'s training metrics; True when an optimizer step of it was skipped
        (the streak grows; the reason is printed the first time it appears), False otherwise
        (the streak ends)."""
        if not metrics.get(SKIPPED_STEPS, 0.0):
            self.run = []
            return False
        reason = skip_reason(metrics) or "non-finite values"
        self.run.append((step, reason))
        if reason not in self._told:
            self._told.add(reason)
            print(f"step {step}: optimizer step skipped, {reason} (the weights stay those of "
                  "the last good step; no weight sync; counted in train/skipped_steps; "
                  f"{self.limit} such steps in a row stop the run, "
                  "train.max_consecutive_skipped_steps); reported once per reason",
                  file=sys.stderr)
        return True

    def check(self) -> None:
        """Raise :class:`TrainingHealthError` once the streak reaches the limit."""
        if len(self.run) < self.limit:
            return
        first, reason = self.run[0]
        raise TrainingHealthError(
            f"training stopped: {len(self.run)} consecutive steps skipped "
            f"(train.max_consecutive_skipped_steps = {self.limit}); the first bad step was "
            f"step {first}: {reason}. Check the rewards of that step's rollout (a huge finite "
            "reward overflows the advantages: rollout.max_abs_reward bounds them), the "
            "learning rate and the loss settings; the checkpoints written hold finite weights"
        )


def applied(metrics: Mapping[str, float], optimizer_steps: int) -> bool:
    """Whether a rollout's training changed the weights: some of its ``optimizer_steps``
    optimizer steps were not skipped."""
    return metrics.get(SKIPPED_STEPS, 0.0) < optimizer_steps
