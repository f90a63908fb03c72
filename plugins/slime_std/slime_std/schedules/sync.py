"""The rollout schedule ``sync`` (``run.rollout_mode = "sync"``, the default)."""

from __future__ import annotations

import time

from slime_core.api import ScheduleBase
from slime_hookspecs import RolloutResult


class SyncSchedule(ScheduleBase):
    """Step k's rollout is generated when step k starts, with the weights of the last sync;
    ``slime_before_rollout(k)`` / ``slime_after_rollout(k)`` fire around its generation."""

    def take(self, step: int, version: int) -> tuple[RolloutResult, dict[str, float]]:
        self.args.prepare(step)
        t = time.perf_counter()
        self.args.before(step)
        result = self.args.rollout(step)
        self.args.after(step, result)
        return result, {"perf/rollout_time": time.perf_counter() - t}
