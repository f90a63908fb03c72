"""A lost rollout engine stops the rollout, even while other engines still answer.

The ray executor's engine facade raises ``EngineLostError`` when an engine's process or node is
gone and fault tolerance is off. That is not one bad sample: before, the rollout failed only the
lost engine's samples and went on with the others, step after step. Here engine 1 of 2 raises
it (the local executor, so no Ray is needed to test the rollout manager's rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slime_hookspecs import RolloutEngineRecord, hookimpl

from slime_core.rollout.engine_client import EngineLostError


@hookimpl
def slime_register_rollout_engines() -> list[RolloutEngineRecord]:
    """This module is its own plugin (``run.plugin_modules``): names resolve with the config."""
    return [RolloutEngineRecord(name="losing_local", factory=_engine,
                                summary="local engines; engine 1 is lost at its first call")]


def _engine(config: Any, engine_index: int = 0, accelerator: Any = None) -> Any:
    from slime_std.engine.local_engine import LocalEngine

    class Losing(LocalEngine):
        def generate(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
            if engine_index == 1:
                raise EngineLostError("rollout engine 1 died (ActorDiedError: test)")
            return super().generate(prompts, params)

    return Losing(config, engine_index, accelerator)


def test_a_lost_engine_stops_the_run_not_only_its_samples(run_slime, base_config,
                                                          tmp_path: Path) -> None:
    cfg = dict(base_config)
    cfg["rollout"] = {**base_config["rollout"], "engine": "losing_local", "num_engines": 2}
    cfg["run"] = {**base_config["run"], "num_rollouts": 1,
                  "plugin_modules": ["tests.test_engine_lost"]}
    with pytest.raises(EngineLostError, match="rollout engine 1 died"):
        run_slime(cfg)
