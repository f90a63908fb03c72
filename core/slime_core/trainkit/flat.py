"""Per-sample tensors as one flat tensor: the trainers' bookkeeping works on the packed batch
(one operator for the batch, not one a sample: on a GPU each is a dispatch, often a launch)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def flat_cat(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """``values`` (one tensor a sample, on one device) flattened and concatenated in order;
    mixed dtypes promote as ``torch.cat`` does."""
    return torch.cat([v if v.dim() == 1 else v.reshape(-1) for v in values])
