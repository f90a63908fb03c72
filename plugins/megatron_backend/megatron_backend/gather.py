"""Collect every TP rank's shard of each parameter (the weight export's collective)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from megatron_backend import parallel
from megatron_backend.convert import megatron_names
from megatron_backend.layout import Layout


def local_state(model: Any) -> dict[str, torch.Tensor]:
    """This rank's parameters by Megatron name (no ``_extra_state`` entries)."""
    return {k: v.detach() for k, v in model.named_parameters()}


def load_local_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy a shard (from :func:`megatron_backend.convert.to_megatron`) into ``model``; every
    parameter must be present with its exact shape."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(state))
    extra = sorted(set(state) - set(params))
    if missing or extra:
        raise ValueError(f"megatron backend: shard does not match the model (missing {missing[:4]}, "
                         f"unexpected {extra[:4]})")
    with torch.no_grad():
        for k, p in params.items():
            if tuple(p.shape) != tuple(state[k].shape):
                raise ValueError(f"megatron backend: {k} has shape {tuple(p.shape)} in the model "
                                 f"and {tuple(state[k].shape)} in the shard")
            p.copy_(state[k])


def gather_shards(model: Any, layout: Layout, stage: int = 0,
                  stages: int = 1) -> dict[str, list[torch.Tensor]]:
    """Name -> the shards of every TP rank, in rank order (replicated tensors: this rank's).

    A collective over the tensor-parallel group: every rank of it must call it.
    """
    local = local_state(model)
    size = parallel.tp_size()
    out: dict[str, list[torch.Tensor]] = {}
    for name, split in megatron_names(layout, stage, stages).items():
        t = local[name].contiguous()
        if split is None or size == 1:
            out[name] = [t]
            continue
        parts = [torch.empty_like(t) for _ in range(size)]
        dist.all_gather(parts, t, group=parallel.tp_group())
        out[name] = parts
    return out
