"""Dynamic-sampling filters: keep or drop a rewarded group (``FilterRecord`` stage
``"dynamic_sampling"``): ``fn(config, group) -> FilterResult``."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import FilterResult, Sample


def group_rewards(config: Any, group: list[Sample]) -> list[float]:
    """The scalar reward of every sample; a dict reward is read at ``rollout.reward_key``.

    A sample without a reward fails, naming it: filters run after rewarding.
    """
    key = config.rollout.reward_key if config is not None else ""
    out = []
    for s in group:
        r = s.reward
        if r is None:
            raise ValueError(
                f"sample group={s.group_index} index={s.index} has no reward "
                f"(status {s.status.value}); dynamic-sampling filters need rewarded groups"
            )
        if isinstance(r, dict):
            if not key or key not in r:
                raise ValueError(
                    f"sample group={s.group_index} index={s.index} has a dict reward with keys "
                    f"{sorted(r)}; set rollout.reward_key to one of them"
                )
            r = r[key]
        out.append(float(r))
    return out


def nonzero_std(config: Any, group: list[Sample]) -> FilterResult:
    """DAPO dynamic sampling: keep a group only when its rewards are not all equal.

    A group whose rewards are all the same (all correct or all wrong) has zero advantage under
    GRPO and teaches nothing; it is dropped with reason ``"zero_std"``. As in slime
    (``std > 0``), equality is exact and a group of one sample is always dropped.
    """
    rewards = group_rewards(config, group)
    if len(rewards) >= 2 and any(r != rewards[0] for r in rewards[1:]):
        return FilterResult(keep=True)
    return FilterResult(keep=False, reason="zero_std")
