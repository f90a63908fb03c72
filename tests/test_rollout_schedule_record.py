"""A third-party rollout schedule: ``run.rollout_mode`` names any registered
``RolloutScheduleRecord``; its factory gets the driver's ``ScheduleArgs`` and its
``rollout_side`` is built once beside the rollout manager (the local executor here; under Ray
the same record serves the rollout manager actor's ``rollout_side_call``, as slime-std's
``fully_async`` does in tests/test_ray_executor.py)."""

from __future__ import annotations

import time
from typing import Any

from slime_core.api import ScheduleBase
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


class ThroughTheSide(ScheduleBase):
    """Generates each step's rollout through its rollout side; the quiet defaults for the rest."""

    def take(self, step: int, version: int) -> tuple[Any, dict[str, float]]:
        self.args.prepare(step)
        self.args.before(step)
        t = time.perf_counter()
        result = self.args.rollout_side().generate(step)
        self.args.after(step, result)
        return result, {"perf/rollout_time": time.perf_counter() - t}


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
