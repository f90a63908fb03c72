"""The Ray executor's rollout future answers what the one-step-off schedule asks of it.

``OneStepOff.checkpoint`` asks a completed in-flight rollout for its ``exception()`` (like
``concurrent.futures.Future``); ``RayFuture`` had only ``result`` and ``done``, so saving a
checkpoint with ``rollout_mode = "one_step_off"`` under Ray failed with an AttributeError
(mypy found it once plugins and core were checked together).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

from slime_core.api import ScheduleArgs  # noqa: E402
from slime_core.executors import ray_executor  # noqa: E402
from slime_hookspecs import RolloutResult  # noqa: E402
from slime_std.schedules.one_step_off import OneStepOff  # noqa: E402


class _FakeRay:
    """``ray.get`` / ``ray.wait`` over plain values: a ref is the result or the error."""

    @staticmethod
    def get(ref: Any) -> Any:
        if isinstance(ref, BaseException):
            raise ref
        return ref

    @staticmethod
    def wait(refs: list[Any], timeout: float | None = None) -> tuple[list[Any], list[Any]]:
        return list(refs), []


def _schedule(monkeypatch: pytest.MonkeyPatch, ref: Any) -> OneStepOff:
    monkeypatch.setattr(ray_executor, "ray", _FakeRay)
    sched = OneStepOff(None, ScheduleArgs(
        rollout=lambda step: RolloutResult(groups=[]),
        submit=lambda step: ray_executor.RayFuture(ref), prepare=lambda step: None,
        source_state=lambda: {"position": 3}, before=lambda step: None,
        after=lambda step, result: None, rollout_side=lambda: None, num_rollouts=4,
        batch_size=1))
    sched._start(1)
    return sched


def test_ray_future_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_executor, "ray", _FakeRay)
    assert ray_executor.RayFuture(RolloutResult(groups=[])).exception() is None
    err = RuntimeError("engine died")
    assert ray_executor.RayFuture(err).exception() is err


def test_one_step_off_checkpoint_under_ray_keeps_the_finished_rollout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    result = RolloutResult(groups=[])
    sched = _schedule(monkeypatch, result)
    assert sched.finished() == (1, result)
    assert sched.checkpoint().state == {"inflight_rollout": 1}
