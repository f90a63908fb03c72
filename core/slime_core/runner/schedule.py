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
``slime_after_rollout(k)`` once it has them.

The schedules are records (:class:`slime_hookspecs.RolloutScheduleRecord`, registered with
``slime_register_rollout_schedules``; slime-std registers ``sync``, ``one_step_off`` and
``fully_async``): the driver looks ``run.rollout_mode`` up and builds the schedule with
``factory(config, ScheduleArgs(...))``; the core names none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from slime_hookspecs import RolloutResult

from slime_core.executors.base import RolloutFuture


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


@dataclass
class ScheduleArgs:
    """What the driver lends a rollout schedule (the second argument of a
    :class:`~slime_hookspecs.RolloutScheduleRecord`'s ``factory(config, args)``)."""

    rollout: Callable[[int], RolloutResult]
    """``rollout(step)``: generate the rollout of ``step`` now, in this thread."""
    submit: Callable[[int], RolloutFuture]
    """``submit(step)``: start the rollout of ``step`` (the executor's ``submit_rollout``)
    and return its future (``result()``, ``done()``, ``exception()``)."""
    prepare: Callable[[int], None]
    """``prepare(step)``: before a rollout is generated or submitted (the driver checks the
    engines' weight versions and reseeds them)."""
    source_state: Callable[[], dict[str, Any]]
    """The train data source's state (for a checkpoint)."""
    before: Callable[[int], None]
    """``before(step)``: fires ``slime_before_rollout``."""
    after: Callable[[int, RolloutResult], None]
    """``after(step, result)``: fires ``slime_after_rollout``."""
    rollout_side: Callable[[], Any]
    """The record's ``rollout_side`` object where the rollout manager runs (built on the
    first call): itself under the local executor, a handle whose method calls run there
    under the ray executor."""
    num_rollouts: int
    """``run.num_rollouts``: no rollout is generated for a step at or past it."""
    batch_size: int
    """``rollout.batch_size``: groups per step."""


class ScheduleBase:
    """A schedule that generates nothing between steps: every moment but :meth:`take` is
    quiet (no generation to drain at a sync or a save, evaluation may reseed, a checkpoint
    keeps only the data source's state, nothing to restore or stop). Subclass it and write
    :meth:`take`; override what a schedule that runs ahead must handle."""

    overlaps = False

    def __init__(self, config: Any, args: ScheduleArgs) -> None:
        self.config, self.args = config, args

    def take(self, step: int, version: int) -> tuple[RolloutResult, dict[str, float]]:
        raise NotImplementedError

    def before_weight_sync(self) -> None:
        pass

    def after_weight_sync(self, version: int, more: bool) -> None:
        pass

    def before_eval(self) -> bool:
        return True

    def checkpoint(self) -> ScheduleCheckpoint:
        return ScheduleCheckpoint(write=lambda _dir: self.args.source_state())

    def after_save(self, version: int, more: bool) -> None:
        pass

    def read_checkpoint(self, directory: Path, state: dict[str, Any]) -> Callable[[], None]:
        return lambda: None

    def stop(self) -> None:
        pass
