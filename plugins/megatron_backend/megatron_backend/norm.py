"""The gradient norm of the whole (unsharded) model and the clip, for both optimizers (AdamW
on every rank's shards, and the distributed optimizer's chunks).

Which tensors are TP shards comes from the converter's table, not from Megatron's
``tensor_model_parallel`` attribute: that is only set when Megatron initialises the weights
itself, which this backend skips (the HF checkpoint overwrites them). A TP shard's squares are
summed once over the **tensor-parallel** group, a replicated tensor's (the norms) counted once,
an expert's (split over expert-parallel ranks, or over tensor-parallel ranks as its own
tensor parallelism) summed over the **expert tensor x expert parallel** group, the stages'
summed over the pipeline group; clipping then matches
``torch.nn.utils.clip_grad_norm_`` of the unsharded model: coefficient ``max_norm / (norm +
1e-6)`` when below 1.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import torch
import torch.distributed as dist

from megatron_backend import parallel


def squares(grads: Iterable[tuple[str, torch.Tensor]], sharded_names: set[str],
            device: Any, expert_names: Collection[str] = frozenset()) -> torch.Tensor:
    """``[TP-sharded, replicated, expert]`` sums of squares of the named gradients, in float64
    on ``device`` (an nccl group reduces device tensors only)."""
    out = torch.zeros(3, dtype=torch.float64, device=device)
    for name, g in grads:
        slot = 2 if name in expert_names else 0 if name in sharded_names else 1
        out[slot] += g.detach().double().pow(2).sum()
    return out


def model_norm(sq: torch.Tensor, pp_group: Any = None) -> float:
    """The whole model's norm from this rank's :func:`squares` (each tensor's elements counted
    once on this TP rank and stage): TP shards summed over the TP group, experts over the
    expert tensor x expert parallel group, stages over ``pp_group``."""
    sharded, replicated, experts = sq[0].clone(), sq[1].clone(), sq[2].clone()
    if parallel.tp_size() > 1:
        dist.all_reduce(sharded, group=parallel.tp_group())
    if parallel.expert_model_size() > 1:
        dist.all_reduce(experts, group=parallel.expert_model_group())
    total = sharded + replicated + experts
    if pp_group is not None:
        dist.all_reduce(total, group=pp_group)
    return float(total.sqrt())


def clip_(grads: Iterable[torch.Tensor | None], norm: float, max_norm: float) -> None:
    """Scale the gradients so the whole model's norm is at most ``max_norm`` (0: no clip)."""
    if not max_norm or max_norm <= 0:
        return
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads:
            if g is not None:
                g.mul_(coef)
