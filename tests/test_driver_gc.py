"""The driver freezes the heap after the first step's training (full collections stop
scanning setup objects) and unfreezes it when the run ends, also when it fails."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from slime_hookspecs import hookimpl


class FreezeProbe:
    def __init__(self, fail_at: int | None = None) -> None:
        self.before_rollout: list[int] = []
        self.fail_at = fail_at

    @hookimpl
    def slime_before_rollout(self, config: Any, rollout_id: int) -> None:
        self.before_rollout.append(gc.get_freeze_count())

    @hookimpl
    def slime_after_train(self, config: Any, rollout_id: int, metrics: Any) -> None:
        if rollout_id == self.fail_at:
            raise RuntimeError("probe failure")


def test_heap_frozen_from_the_second_step_and_unfrozen_after(base_config, run_slime) -> None:
    gc.unfreeze()
    base_config["run"]["num_rollouts"] = 3
    probe = FreezeProbe()
    run_slime(base_config, plugins=[probe])
    assert probe.before_rollout[0] == 0
    assert all(n > 10_000 for n in probe.before_rollout[1:]), probe.before_rollout
    assert gc.get_freeze_count() == 0


def test_a_failed_run_unfreezes_too(base_config, run_slime) -> None:
    gc.unfreeze()
    base_config["run"]["num_rollouts"] = 3
    probe = FreezeProbe(fail_at=1)
    with pytest.raises(RuntimeError, match="probe failure"):
        run_slime(base_config, plugins=[probe])
    assert probe.before_rollout[1] > 0
    assert gc.get_freeze_count() == 0
