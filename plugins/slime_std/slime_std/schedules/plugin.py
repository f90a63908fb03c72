"""Default plugin ``rollout_schedules``: the rollout schedules ``sync``, ``one_step_off`` and
``fully_async`` (:mod:`slime_std.schedules`). Their modules are imported only when a
schedule or a rollout side is built."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Config, RolloutScheduleRecord, hookimpl


def _sync(config: Config, args: Any) -> Any:
    from slime_std.schedules.sync import SyncSchedule

    return SyncSchedule(config, args)


def _one_step_off(config: Config, args: Any) -> Any:
    from slime_std.schedules.one_step_off import OneStepOff

    return OneStepOff(config, args)


def _fully_async(config: Config, args: Any) -> Any:
    from slime_std.schedules.fully_async import FullyAsync

    return FullyAsync(config, args)


def _streaming(config: Config, rollouts: Any) -> Any:
    from slime_std.schedules.streaming import StreamingRollout

    return StreamingRollout(rollouts)


def _check_one_step_off(config: Config) -> None:
    from slime_std.schedules.checks import check_one_step_off

    check_one_step_off(config)


def _check_fully_async(config: Config) -> None:
    from slime_std.schedules.checks import check_fully_async

    check_fully_async(config)


@hookimpl
def slime_register_rollout_schedules() -> list[RolloutScheduleRecord]:
    return [
        RolloutScheduleRecord(name="sync", factory=_sync,
                              summary="each step's rollout generated when the step starts"),
        RolloutScheduleRecord(name="one_step_off", factory=_one_step_off, check=_check_one_step_off,
                              summary="step k+1's rollout generated while step k trains"),
        RolloutScheduleRecord(name="fully_async", factory=_fully_async, rollout_side=_streaming,
                              check=_check_fully_async,
                              summary="engines generate continuously into a bounded buffer "
                                      "while the trainer consumes it"),
    ]
