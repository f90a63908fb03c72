"""Private helpers shared by the GRPO-family ops: grouping, packing, masked statistics.

Batch convention (slime's): one entry per sample, each a 1-D tensor over that sample's
response tokens (``T_i = response_lengths[i]``); samples of one prompt are consecutive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from slime_core.api import flat_cat, split_samples
from torch import Tensor


def group_index(
    num_samples: int,
    n_samples_per_prompt: int | None = None,
    group_ids: Sequence[int] | Tensor | None = None,
    device: torch.device | None = None,
) -> Tensor:
    """Dense group index ``g[i] in [0, G)`` for each sample, shape ``[N]``, dtype long.

    ``group_ids`` (any hashable ints, one per sample) wins when given; otherwise sample ``i``
    belongs to group ``i // n_samples_per_prompt`` and ``N`` must be a multiple of it.
    """
    if group_ids is not None:
        ids = torch.as_tensor(group_ids, device=device).long().reshape(-1)
        if ids.numel() != num_samples:
            raise ValueError(f"group_ids has {ids.numel()} entries for {num_samples} samples")
        return torch.unique(ids, return_inverse=True)[1]
    if n_samples_per_prompt is None:
        raise ValueError("pass n_samples_per_prompt or group_ids to define the groups")
    if n_samples_per_prompt < 1 or num_samples % n_samples_per_prompt != 0:
        raise ValueError(
            f"{num_samples} samples cannot be split into groups of n_samples_per_prompt={n_samples_per_prompt}"
        )
    return torch.arange(num_samples, device=device) // n_samples_per_prompt


def group_mean_std(values: Tensor, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group mean, unbiased group std and group size, each shape ``[N]``.

    std uses Bessel's correction (torch's default ``std``); for a singleton group it is
    reported as 0 (torch would give nan) and callers must not divide by it.
    """
    num_groups = int(index.max().item()) + 1 if index.numel() else 0
    counts = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, index, torch.ones_like(values)
    )
    sums = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, index, values
    )
    mean = (sums / counts)[index]
    sq = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, index, (values - mean) ** 2
    )
    var = torch.where(counts > 1, sq / (counts - 1).clamp_min(1), torch.zeros_like(sq))
    return mean, var.sqrt()[index], counts[index]


def as_float_rewards(rewards: Tensor | Sequence[float]) -> Tensor:
    """Rewards as a 1-D floating tensor (float32 unless already floating)."""
    t = torch.as_tensor(rewards)
    if not t.is_floating_point():
        t = t.float()
    return t.reshape(-1)


def float_masks(loss_masks: Sequence[Tensor], like: Tensor | None = None) -> list[Tensor]:
    """Loss masks (bool/int/float 0-1) as float tensors (dtype and device of ``like`` when given)."""
    dtype = like.dtype if like is not None and like.is_floating_point() else torch.float32
    device = like.device if like is not None else None
    # masks already in place are taken as they are: a conversion per sample is an operator
    # dispatch per sample (a GPU step's host time, issue 43)
    return [m if isinstance(m, Tensor) and m.dtype == dtype
            and (device is None or m.device == device)
            else torch.as_tensor(m).to(device=device, dtype=dtype) for m in loss_masks]


def check_lengths(name: str, tensors: Sequence[Tensor], lengths: Sequence[int]) -> None:
    """Fail with a clear message if per-sample tensors do not match the expected lengths."""
    if len(tensors) != len(lengths):
        raise ValueError(f"{name}: {len(tensors)} samples, expected {len(lengths)}")
    for i, (t, n) in enumerate(zip(tensors, lengths, strict=True)):
        if t.dim() != 1 or t.numel() != n:
            raise ValueError(f"{name}[{i}] has shape {tuple(t.shape)}, expected ({n},)")


def lengths_of(tensors: Sequence[Tensor]) -> list[int]:
    return [int(t.numel()) for t in tensors]


def pack(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenate per-sample 1-D tensors (slime's packed layout); the tensor itself, not a
    copy, for the views :func:`unpack` (or the trainer's forward) cut from it."""
    if len(tensors) == 0:
        return torch.zeros(0)
    return flat_cat(tensors)


def unpack(packed: Tensor, lengths: Sequence[int]) -> list[Tensor]:
    """``packed`` cut into per-sample views, which :func:`pack` turns back into it."""
    return split_samples(packed, lengths)


def last_masked_index(mask: Tensor) -> int | None:
    """Index of the last position with mask != 0, or None when the sample is fully masked."""
    nz = torch.nonzero(mask, as_tuple=True)[0]
    return int(nz[-1].item()) if nz.numel() else None


def masked_token_mean(values: Sequence[Tensor], masks: Sequence[Tensor]) -> Tensor:
    """sum_i sum_t m_it x_it / max(sum_i sum_t m_it, 1): a detached 0-dim metric."""
    if len(values) == 0:
        return torch.zeros(())
    # packed: two products over the whole batch instead of two per sample
    flat = pack(values).detach().float()
    return packed_masked_mean(flat, pack_masks(masks, flat.device))


def pack_masks(masks: Sequence[Tensor], device: torch.device) -> Tensor:
    """Per-sample masks (bool/int/float) as one packed float32 tensor on ``device``."""
    if len(masks) == 0:
        return torch.zeros(0, device=device)
    if any(m.device != masks[0].device for m in masks):
        masks = [m.to(device) for m in masks]
    return flat_cat(masks).to(device, torch.float32)


def packed_masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """``sum(m x) / max(sum(m), 1)`` over packed ``values`` (``[T]`` or ``[K, T]``: one mean
    per row) and the packed float ``mask`` ``[T]``."""
    if values.shape[-1] != mask.numel():
        raise ValueError(f"values have {values.shape[-1]} tokens, masks {mask.numel()}")
    return (values * mask).sum(-1) / torch.clamp_min(mask.sum(), 1.0)


def cfg_get(config: Any, key: str, default: Any) -> Any:
    """Read ``key`` from a Mapping, an attribute object (argparse.Namespace, dataclass) or None."""
    if config is None:
        return default
    if isinstance(config, Mapping):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value
