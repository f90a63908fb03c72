"""--dynamic-sampling-filter-path: DAPO's filter, slime's way."""

import torch

from slime.rollout.filter_hub.base_types import DynamicFilterOutput
from slime.utils.types import Sample

from slime_user._record import record

SEEN = {"groups": 0, "dropped": 0}


def nonzero_std(args, samples: list[Sample], **kwargs) -> DynamicFilterOutput:
    SEEN["groups"] += 1
    rewards = torch.tensor([s.get_reward_value(args) for s in samples], dtype=torch.float64)
    keep = bool(rewards.std() > 0)
    SEEN["dropped"] += not keep
    record("filter", keep=keep)
    return DynamicFilterOutput(keep=keep, reason=None if keep else "all_same")
