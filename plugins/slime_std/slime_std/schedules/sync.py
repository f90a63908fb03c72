"""The rollout schedule ``sync`` (``run.rollout_mode = "sync"``, the default)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slime_core.api import ScheduleArgs, ScheduleCheckpoint
from slime_hookspecs import RolloutResult


class SyncSchedule:
    """Step k's rollout is generated when step k starts, with the weights of the last sync;
    ``slime_before_rollout(k)`` / ``slime_after_rollout(k)`` fire around its generation."""

    overlaps = False

    def __init__(self, config: Any, args: ScheduleArgs) -> None:
        self._rollout, self._prepare, self._source_state = args.rollout, args.prepare, args.source_state
        self._before, self._after = args.before, args.after

    def take(self, step: int, version: int) -> tuple[RolloutResult, dict[str, float]]:
        self._prepare(step)
        t = time.perf_counter()
        self._before(step)
        result = self._rollout(step)
        self._after(step, result)
        return result, {"perf/rollout_time": time.perf_counter() - t}

    def before_weight_sync(self) -> None:
        pass

    def after_weight_sync(self, version: int, more: bool) -> None:
        pass

    def before_eval(self) -> bool:
        return True

    def checkpoint(self) -> ScheduleCheckpoint:
        return ScheduleCheckpoint(write=lambda _dir: self._source_state())

    def after_save(self, version: int, more: bool) -> None:
        pass

    def read_checkpoint(self, directory: Path, state: dict[str, Any]) -> Callable[[], None]:
        return lambda: None

    def stop(self) -> None:
        pass
