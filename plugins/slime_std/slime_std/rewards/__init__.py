"""The reward functions of ``core_rewards``: ``exact``, ``math``, ``reasoning_gym``, ``remote``, ...

Each record factory is ``factory(config) -> fn``, ``fn(sample) -> float`` (``remote`` returns
a coroutine function). The functions are pure functions of the sample (the factory binds the
options from the config with ``functools.partial``, so they pickle). math-verify and
reasoning-gym are imported on first use.
"""

from __future__ import annotations

from slime_std.rewards.exact import exact_reward, make_exact_reward
from slime_std.rewards.math_reward import make_math_reward, math_reward
from slime_std.rewards.reasoning_gym_reward import make_reasoning_gym_reward, reasoning_gym_reward
from slime_std.rewards.remote import RemoteRewardError, make_remote_reward, remote_reward
from slime_std.rewards.text import cut_at_stop, extract_answer

__all__ = [
    "RemoteRewardError",
    "cut_at_stop",
    "exact_reward",
    "extract_answer",
    "make_exact_reward",
    "make_math_reward",
    "make_reasoning_gym_reward",
    "make_remote_reward",
    "math_reward",
    "reasoning_gym_reward",
    "remote_reward",
]
