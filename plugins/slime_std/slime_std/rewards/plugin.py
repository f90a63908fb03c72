"""Default plugin ``core_rewards``: the reward functions of slime's rm_hub and more: ``exact``,
``math``, ``dapo``, ``deepscaler``, the ``boxed_`` form of each math reward, ``f1``, ``gpqa``,
``random``, ``reasoning_gym`` and ``remote``. A row's ``metadata.rm_type`` picks one of them per
row (the core's routing looks the name up among the records). Heavy verifiers are imported on
first use; probes only look for modules.
``extra["needs_label"]`` makes the file sources refuse rows without a usable label
(the core's row checks); ``extra["processes"]`` says the built function is picklable and pure,
so ``rollout.reward_processes`` may score with it in worker processes."""

from __future__ import annotations

from slime_hookspecs import Config, RewardFunctionRecord, hookimpl

from slime_std.extras import probe
from slime_std.rewards import (
    make_exact_reward,
    make_math_reward,
    make_reasoning_gym_reward,
    make_remote_reward,
)
from slime_std.rewards.dapo import make_boxed_dapo_reward, make_dapo_reward
from slime_std.rewards.deepscaler import make_boxed_deepscaler_reward, make_deepscaler_reward
from slime_std.rewards.f1 import make_f1_reward
from slime_std.rewards.gpqa import make_gpqa_reward
from slime_std.rewards.math_reward import make_boxed_math_reward
from slime_std.rewards.random_reward import make_random_reward


@hookimpl
def slime_configure(config: Config) -> None:
    from slime_std.fast_path import configure, resolve_rewards

    configure(config, resolve_rewards)


@hookimpl
def slime_register_reward_functions() -> list[RewardFunctionRecord]:
    return [
        RewardFunctionRecord(
            name="exact", factory=make_exact_reward, extra={"needs_label": True, "processes": True},
            summary="1.0 when the response (cut at a stop string, stripped) equals the label",
        ),
        RewardFunctionRecord(
            name="math", factory=make_math_reward, extra={"needs_label": True, "processes": True},
            summary="math-verify: the response's answer (\\boxed{} first) equals the label",
            probe=probe("math_verify"),
        ),
        RewardFunctionRecord(
            name="boxed_math", factory=make_boxed_math_reward, extra={"needs_label": True, "processes": True},
            summary="math on the last \\boxed{} only; 0.0 without one",
            probe=probe("math_verify"),
        ),
        RewardFunctionRecord(
            name="dapo", factory=make_dapo_reward, extra={"needs_label": True, "processes": True},
            summary="DAPO: the last 'Answer:' line equals the integer label: 1.0, else -1.0",
        ),
        RewardFunctionRecord(
            name="boxed_dapo", factory=make_boxed_dapo_reward, extra={"needs_label": True, "processes": True},
            summary="DAPO's strict box: the last \\boxed{} equals the integer label: 1.0, else -1.0",
        ),
        RewardFunctionRecord(
            name="deepscaler", factory=make_deepscaler_reward, extra={"needs_label": True, "processes": True},
            summary="DeepScaleR: the \\boxed{} answer after </think> equals the label (MATH "
                    "normalisation or sympy): 1.0, else 0.0",
            probe=probe("sympy"),
        ),
        RewardFunctionRecord(
            name="boxed_deepscaler", factory=make_boxed_deepscaler_reward,
            extra={"needs_label": True, "processes": True}, probe=probe("sympy"),
            summary="deepscaler on the last \\boxed{} of the response, no </think> needed",
        ),
        RewardFunctionRecord(
            name="f1", factory=make_f1_reward, extra={"needs_label": True, "processes": True},
            summary="SQuAD token F1 of the response against the label (yes/no all or nothing)",
        ),
        RewardFunctionRecord(
            name="gpqa", factory=make_gpqa_reward, extra={"processes": True},
            summary="multiple choice: the response's letter equals the right one (label or "
                    "metadata.correct_letter / choices)",
        ),
        RewardFunctionRecord(
            name="random", factory=make_random_reward,
            summary="0.0 or 1.0, a seeded coin per sample (pipeline smoke tests)",
        ),
        RewardFunctionRecord(
            name="reasoning_gym", factory=make_reasoning_gym_reward,
            summary="the reasoning-gym task's own scorer on the <answer> block",
            probe=probe("reasoning_gym"),
        ),
        RewardFunctionRecord(
            name="remote", factory=make_remote_reward,
            summary="POST the sample to rollout.reward_kwargs.url; retries with back-off",
        ),
    ]
