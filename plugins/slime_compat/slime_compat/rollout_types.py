"""Behind the shim's ``slime.rollout.base_types``: the rollout function's output types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RolloutFnTrainOutput:
    samples: list[list[Any]]
    metrics: dict[str, Any] | None = None


@dataclass
class RolloutFnEvalOutput:
    data: dict[str, dict[str, Any]]
    metrics: dict[str, Any] | None = None


def call_rollout_fn(fn: Any, *args: Any, evaluation: bool, **kwargs: Any) -> Any:
    out = fn(*args, **kwargs, evaluation=evaluation)
    if not isinstance(out, (RolloutFnTrainOutput, RolloutFnEvalOutput)):
        out = RolloutFnEvalOutput(data=out) if evaluation else RolloutFnTrainOutput(samples=out)
    return out
