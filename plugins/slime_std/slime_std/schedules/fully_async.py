"""The driver's side of fully-asynchronous rollouts (``run.rollout_mode = "fully_async"``).

The generator (:class:`slime_std.schedules.streaming.StreamingRollout`, the record's
``rollout_side``) runs where the rollout manager runs and fills a bounded buffer of completed groups; the driver:

* starts it after the first weight sync and takes ``rollout.batch_size`` groups per step
  (``slime_before_rollout(k)`` fires when step k starts taking, ``slime_after_rollout(k)``
  once it has them: a "rollout" is the batch taken from the buffer, not a generation);
* pauses it around every weight sync (the calls in flight are aborted and their partial
  responses continue with the new weights, or a plugin holds them: ``slime_hold_rollouts``,
  e.g. agent episodes suspended across the update) and around a checkpoint (held rollouts
  are released and waited for: the snapshot needs no round in flight); a pause or a take raises
  the error that stopped the generator (e.g. a lost engine without ``run.fault_tolerance``),
  so the run ends naming it (engines restarted under fault tolerance do not stop it);
* evaluates without pausing it: an evaluation's engine calls interleave with the generator's
  (the engines serialise calls; weights do not change during an evaluation);
* saves the buffer and the groups in generation in the checkpoint (``fully_async.json``),
  with the data source's state of the same paused instant, and restores both at resume.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slime_core.api import ScheduleArgs, ScheduleCheckpoint, read_json
from slime_hookspecs import RolloutResult

STATE_FILE = "fully_async.json"  # checkpoint file of the generator's buffer and partials


class FullyAsync:
    """The :class:`~slime_core.api.RolloutSchedule` of ``fully_async``. ``args.rollout_side()``
    is the generator where the rollout manager runs (``resume``, ``pause``, ``take``,
    ``snapshot``, ``restore``, ``stop``, ``state``: itself, or the executor's handle on it);
    ``args.source_state()``: the train data source's state."""

    overlaps = True

    def __init__(self, config: Any, args: ScheduleArgs) -> None:
        self.stream, self.batch_size = args.rollout_side(), args.batch_size
        self._before, self._after, self._source_state = args.before, args.after, args.source_state
        self.stopped = False

    def take(self, step: int, version: int) -> tuple[RolloutResult, dict[str, float]]:
        self._before(step)
        result, waited = self.stream.take(self.batch_size, version, step)
        self._after(step, result)
        return result, {"perf/rollout_wait_time": waited}

    def pause(self) -> None:
        """Aborts the calls in flight; their partials go on after :meth:`resume`."""
        if not self.stopped:
            self.stream.pause()

    def resume(self, version: int) -> None:
        if not self.stopped:
            self.stream.resume(version)

    before_weight_sync = pause

    def after_weight_sync(self, version: int, more: bool) -> None:
        if more:
            self.resume(version)

    def before_eval(self) -> bool:
        return False  # the generator draws from the engines meanwhile: no reseed

    def checkpoint(self) -> ScheduleCheckpoint:
        """Paused: the buffer, the groups in generation and the data source are one instant."""
        self.pause()
        held = dict(self.stream.snapshot())

        def write(directory: Path) -> dict[str, Any]:
            (directory / STATE_FILE).write_text(json.dumps(held))
            return self._source_state()

        return ScheduleCheckpoint(write=write)

    def after_save(self, version: int, more: bool) -> None:
        if more:
            self.resume(version)

    def read_checkpoint(self, directory: Path, state: dict[str, Any]) -> Callable[[], None]:
        if not (directory / STATE_FILE).is_file():
            return lambda: None
        held = read_json(directory / STATE_FILE)
        return lambda: self.stream.restore(held)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.stream.stop()
