"""The rollout schedule: how the rollout of each step is produced, one protocol that the driver
calls whatever ``run.rollout_mode`` says (``sync``, ``one_step_off``, ``fully_async``).

The driver knows five moments and nothing of the mode:

* :meth:`RolloutSchedule.take`: the rollout step k trains on, with its timings
  (``perf/rollout_time`` when generated now, ``perf/rollout_wait_time`` when it was produced
  meanwhile);
* :meth:`~RolloutSchedule.before_weight_sync` / :meth:`~RolloutSchedule.after_weight_sync`:
  weights never change under a generation (drained, or paused and resumed);
* :meth:`~RolloutSchedule.before_eval`: an evaluation shares the engines with the schedule;
* :meth:`~RolloutSchedule.checkpoint` / :meth:`~RolloutSchedule.after_save` /
  :meth:`~RolloutSchedule.read_checkpoint`: what a checkpoint keeps of the generation in
  flight, and its restoration at resume;
* :meth:`~RolloutSchedule.stop`: before the engines go.

Hook contract (``slime_before_rollout(k)`` / ``slime_after_rollout(k)``), by mode, in one
place: ``sync`` fires them around the generation of step k; ``one_step_off`` fires
``slime_before_rollout(k+1)`` when that rollout is submitted (before ``slime_before_train(k)``)
and ``slime_after_rollout(k+1)`` when its result is collected; ``fully_async`` fires
``slime_before_rollout(k)`` when step k starts taking groups from the buffer and
``slime_after_rollout(k)`` once it has them. The implementations:
:class:`SyncSchedule` here, :class:`~slime_core.runner.pipeline.OneStepOff`,
:class:`~slime_core.runner.fully_async.FullyAsync`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from slime_hookspecs import RolloutResult


@dataclass
class ScheduleCheckpoint:
    """What a checkpoint keeps of a schedule: ``state`` goes into the driver's state file,
    ``write(dir)`` writes the schedule's files into the checkpoint being written and returns
    the train data source's state to save with them (the state that matches what was kept)."""

    write: Callable[[Path], dict[str, Any]]
    state: dict[str, Any] = field(default_factory=lambda: {"inflight_rollout": None})


class RolloutSchedule(Protocol):
    """How the driver gets each step's rollout (module docstring)."""

    overlaps: bool
    """Whether generation runs while the trainer trains (then the driver reports
    ``perf/rollout_drain_time``: the wait for, or the abort of, the generation at a sync)."""

    def take(self, step: int, version: int) -> tuple[RolloutResult, dict[str, float]]:
        """The rollout step ``step`` trains on (the trainer holds weight ``version``), and the
        timings of getting it."""
        ...

    def before_weight_sync(self) -> None:
        """No generation may run while the engines' weights change."""
        ...

    def after_weight_sync(self, version: int, more: bool) -> None:
        """The engines hold ``version``; ``more``: steps remain to generate for."""
        ...

    def before_eval(self) -> bool:
        """An evaluation is about to use the engines; ``True`` when the driver may reseed
        them for it (nothing of the schedule's is generating meanwhile)."""
        ...

    def checkpoint(self) -> ScheduleCheckpoint:
        """Called at a save (after ``slime_before_save``): bring the generation to an instant
        that a checkpoint can hold, and say what to write."""
        ...

    def after_save(self, version: int, more: bool) -> None:
        """The checkpoint is written; generation may go on (the engines hold ``version``)."""
        ...

    def read_checkpoint(self, directory: Path, state: dict[str, Any]) -> Callable[[], None]:
        """Read this schedule's part of checkpoint ``directory`` (``state``: the driver's
        state file); raise on a damaged file before anything is replaced. The callable
        returned applies it, once the trainer, data source, step and version are restored."""
        ...

    def stop(self) -> None:
        """The run ends (also on error): nothing generates afterwards."""
        ...


class SyncSchedule:
    """``run.rollout_mode = "sync"``: step k's rollout is generated when step k starts, with
    the weights of the last sync."""

    overlaps = False

    def __init__(self, *, rollout: Callable[[int], RolloutResult],
                 prepare: Callable[[int], None], source_state: Callable[[], dict[str, Any]],
                 before: Callable[[int], None],
                 after: Callable[[int, RolloutResult], None]) -> None:
        self._rollout, self._prepare, self._source_state = rollout, prepare, source_state
        self._before, self._after = before, after

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
