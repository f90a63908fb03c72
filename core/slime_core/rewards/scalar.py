"""The scalar a sample's reward stands for, as metrics, filters and the batch converter read it."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Sample


def scalar_reward(config: Any, sample: Sample) -> float:
    """The scalar of a sample's reward (``rollout.reward_key`` picks from a dict)."""
    r = sample.reward
    if isinstance(r, dict):
        key = config.rollout.reward_key
        if not key:
            raise ValueError(
                f"sample {sample.index} has a dict reward {sorted(r)}; set rollout.reward_key"
            )
        if key not in r:
            raise ValueError(f"rollout.reward_key {key!r} not in reward keys {sorted(r)}")
        return float(r[key])
    return float(r) if r is not None else 0.0
