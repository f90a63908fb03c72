"""A third-party rollout schedule: ``run.rollout_mode`` names any registered
``RolloutScheduleRecord``; its factory gets the driver's ``ScheduleArgs`` and its
``rollout_side`` is built once beside the rollout manager (the local executor here; under Ray
the same record serves the rollout manager actor's ``rollout_side_call``, as slime-std's
``fully_async`` does in tests/test_ray_executor.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from slime_core.api import ScheduleArgs, ScheduleCheckpoint
from slime_hookspecs import RolloutScheduleRecord, hookimpl

from tests.conftest import read_metrics


class Side:
    """Runs where the rollout manager runs: generates a step's rollout there."""

    built: list[Any] = []

    def __init__(self, config: Any, rollouts: Any) -> None:
        self.rollouts = rollouts
        Side.built.append(rollouts)

    def generate(self, step: int) -> Any:
        return self.rollouts.rollout(step)


class ThroughTheSide:
    overlaps = False

    def __init__(self, config: Any, args: ScheduleArgs) -> None:
        self.args = args

    def take(self, step: int, version: int) -> tuple[Any, dict[str, float]]:
        self.args.prepare(step)
        self.args.before(step)
        t = time.perf_counter()
        result = self.args.rollout_side().generate(step)
        self.args.after(step, result)
        return result, {"perf/rollout_time": time.perf_counter() - t}

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

    def read_checkpoint(self, directory: Path, state: dict[str, Any]) -> Any:
        return lambda: None

    def stop(self) -> None:
        pass


class SchedulePlugin:
    @hookimpl
    def slime_register_rollout_schedules(self) -> list[RolloutScheduleRecord]:
        return [RolloutScheduleRecord(name="through_the_side", factory=ThroughTheSide,
                                      rollout_side=Side, summary="a test schedule")]


def test_a_plugin_schedule_runs_with_its_rollout_side(base_config, run_slime) -> None:
    base_config["run"]["rollout_mode"] = "through_the_side"
    base_config["data"]["eval_path"] = ""
    Side.built.clear()
    rows = read_metrics(run_slime(base_config, [SchedulePlugin()]))
    assert len(rows) == 2 and all("perf/rollout_time" in r for r in rows)
    assert len(Side.built) == 1  # built once, beside the run's rollout manager
