"""The driver's side of fully-asynchronous rollouts (``run.rollout_mode = "fully_async"``).

The generator (:class:`slime_core.rollout.streaming.StreamingRollout`) runs where the rollout
manager runs and fills a bounded buffer of completed groups; the driver:

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

from collections.abc import Callable
from typing import Any

from slime_hookspecs import RolloutResult

STATE_FILE = "fully_async.json"  # checkpoint file of the generator's buffer and partials


class FullyAsync:
    """``stream``: the executor's generator handle (``resume``, ``pause``, ``take``,
    ``snapshot``, ``restore``, ``stop``, ``state``)."""

    def __init__(self, stream: Any, *, batch_size: int, before: Callable[[int], None],
                 after: Callable[[int, RolloutResult], None]) -> None:
        self.stream, self.batch_size = stream, batch_size
        self._before, self._after = before, after
        self.stopped = False

    def take(self, step: int, version: int) -> tuple[RolloutResult, float]:
        self._before(step)
        result, waited = self.stream.take(self.batch_size, version, step)
        self._after(step, result)
        return result, waited

    def pause(self) -> None:
        if not self.stopped:
            self.stream.pause()

    def resume(self, version: int) -> None:
        if not self.stopped:
            self.stream.resume(version)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.stream.snapshot())

    def restore(self, state: dict[str, Any]) -> None:
        self.stream.restore(state)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.stream.stop()
