"""Built-in plugin ``core_rewards``: the ``exact``, ``math``, ``reasoning_gym`` and ``remote``
reward functions. Heavy verifiers are imported on first use; probes only look for modules.
``extra["needs_label"]`` makes the file sources refuse rows without a usable label
(:mod:`slime_core.data.rowcheck`)."""

from __future__ import annotations

import importlib.util

from slime_core.rewards import (
    make_exact_reward,
    make_math_reward,
    make_reasoning_gym_reward,
    make_remote_reward,
)
from slime_hookspecs import RewardFunctionRecord, hookimpl


def _needs(module: str, dist: str):
    def probe() -> str | None:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {dist})"
        return None

    return probe


@hookimpl
def slime_register_reward_functions() -> list[RewardFunctionRecord]:
    return [
        RewardFunctionRecord(
            name="exact", factory=make_exact_reward, extra={"needs_label": True},
            summary="1.0 when the response (cut at a stop string, stripped) equals the label",
        ),
        RewardFunctionRecord(
            name="math", factory=make_math_reward, extra={"needs_label": True},
            summary="math-verify: the response's answer (\\boxed{} first) equals the label",
            probe=_needs("math_verify", "math-verify"),
        ),
        RewardFunctionRecord(
            name="reasoning_gym", factory=make_reasoning_gym_reward,
            summary="the reasoning-gym task's own scorer on the <answer> block",
            probe=_needs("reasoning_gym", "reasoning-gym"),
        ),
        RewardFunctionRecord(
            name="remote", factory=make_remote_reward,
            summary="POST the sample to rollout.reward_kwargs.url; retries with back-off",
        ),
    ]
