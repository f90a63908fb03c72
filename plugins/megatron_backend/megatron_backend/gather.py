"""Collect every TP rank's shard of each parameter (the weight export's collective)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from megatron_backend import parallel
from megatron_backend.convert import is_expert, local_experts, megatron_names
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


def gather_shards(model: Any, layout: Layout, stage: int = 0, stages: int = 1,
                  bucket_mb: float = 0.0) -> dict[str, list[torch.Tensor]]:
    """Name -> the shards of every TP rank, in rank order (replicated tensors: this rank's).

    ``bucket_mb > 0``: the sharded tensors go in buckets of one dtype and at most that many
    MiB of this rank's shards (a tensor larger than a bucket gets its own), one all-gather of
    the flattened bucket each; ``0``: one all-gather per tensor. The result is the same.
    A collective over the tensor-parallel group: every rank of it must call it (the bucket
    plan depends only on names, shapes and dtypes, equal on every rank).
    """
    local = local_state(model)
    size = parallel.tp_size()
    out: dict[str, list[torch.Tensor]] = {}
    pending: dict[torch.dtype, list[str]] = {}
    limit = bucket_mb * 2**20

    def flush(dtype: torch.dtype) -> None:
        names = pending.pop(dtype, [])
        if not names:
            return
        flat = torch.cat([local[n].reshape(-1) for n in names])
        parts = [torch.empty_like(flat) for _ in range(size)]
        dist.all_gather(parts, flat, group=parallel.tp_group())
        offset = 0
        for n in names:
            t = local[n]
            k = t.numel()
            out[n] = [p[offset:offset + k].view(t.shape) for p in parts]
            offset += k

    for name, split in megatron_names(layout, stage, stages).items():
        t = local[name].contiguous()
        if split is None or size == 1:
            out[name] = [t]
            continue
        if bucket_mb <= 0:
            parts = [torch.empty_like(t) for _ in range(size)]
            dist.all_gather(parts, t, group=parallel.tp_group())
            out[name] = parts
            continue
        bucket = pending.setdefault(t.dtype, [])
        held = sum(local[n].numel() for n in bucket) * t.element_size()
        if bucket and held + t.numel() * t.element_size() > limit:
            flush(t.dtype)
        pending.setdefault(t.dtype, []).append(name)
    for dtype in sorted(pending, key=str):  # the same order on every rank
        flush(dtype)
    return {n: out[n] for n in megatron_names(layout, stage, stages)}


def gather_experts(model: Any, layout: Layout,
                   tensors: dict[str, torch.Tensor] | None = None) -> dict[str, list[torch.Tensor]]:
    """Every expert of every layer of this stage under its **global** number
    (``...local_experts.{global}...``), gathered over the expert-parallel group: one
    all-gather per dtype of this rank's experts laid end to end (``tensors``: other tensors
    of the parameters' names and shapes, e.g. their gradients). A collective over that group:
    every rank of it must call it (equal shapes on every rank: equal shares)."""
    source = local_state(model) if tensors is None else tensors
    local = {k: v.contiguous() for k, v in source.items() if is_expert(k)}
    size, group, rank = parallel.ep_size(), parallel.ep_group(), parallel.ep_rank()
    per_rank = len(local_experts(layout, rank, size))
    out: dict[str, list[torch.Tensor]] = {}
    by_dtype: dict[torch.dtype, list[str]] = {}
    for name, t in local.items():
        by_dtype.setdefault(t.dtype, []).append(name)
    for dtype in sorted(by_dtype, key=str):  # the same order on every rank
        names = by_dtype[dtype]
        flat = torch.cat([local[n].reshape(-1) for n in names])
        parts = [torch.empty_like(flat) for _ in range(size)]
        dist.all_gather(parts, flat, group=group)
        for r, part in enumerate(parts):
            offset = 0
            for n in names:
                t = local[n]
                head, rest = n.split("local_experts.", 1)
                e, tail = rest.split(".", 1)
                global_name = f"{head}local_experts.{r * per_rank + int(e)}.{tail}"
                out[global_name] = [part[offset:offset + t.numel()].view(t.shape)]
                offset += t.numel()
    return out
