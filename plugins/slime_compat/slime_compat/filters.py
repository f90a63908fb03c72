"""Behind the shim's ``slime.rollout.filter_hub``: ``DynamicFilterOutput`` and slime's two
built-in dynamic filters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class DynamicFilterOutput:
    keep: bool
    reason: str | None = None
    # slime: keep a rejected group when dropping it would need another sampling round.
    # The project's dynamic sampling has no such fallback: the field is accepted and ignored.
    keep_when_insufficient: bool = False


def call_dynamic_filter(fn: Any, *args: Any, **kwargs: Any) -> DynamicFilterOutput:
    if fn is None:
        return DynamicFilterOutput(keep=True)
    out = fn(*args, **kwargs)
    return out if hasattr(out, "keep") else DynamicFilterOutput(keep=bool(out))


def check_reward_nonzero_std(args: Any, samples: list[Any], **kwargs: Any) -> DynamicFilterOutput:
    """Keep a group whose rewards are not all equal (sample std > 1e-6, in float64)."""
    import torch

    rewards = [s.get_reward_value(args) for s in samples]
    keep = bool(torch.tensor(rewards, dtype=torch.float64).std() > 1e-6)
    return DynamicFilterOutput(keep=keep, reason=None if keep else f"zero_std_{round(rewards[0], 1)}")


def check_reward_nonzero_std_with_fallback(args: Any, samples: list[Any], **kwargs: Any) -> DynamicFilterOutput:
    out = check_reward_nonzero_std(args, samples, **kwargs)
    out.keep_when_insufficient = True
    return out
