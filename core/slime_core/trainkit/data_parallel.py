"""Data parallelism for trainer backends: global loss weights, gradient and metric all-reduce.

Each rank holds a full replica and trains on its share of the step's groups (see
:mod:`slime_core.executors.sharding`). For the update to equal the single-process one on the
same batch, two things must hold:

1. every micro-batch's loss weight uses the *global* totals of the mini-batch (samples or
   loss-masked tokens summed over all ranks), not the rank's own;
2. the weighted gradients are *summed* over ranks (all-reduce SUM), before clipping.

Then the sum over ranks of ``w_mb * grad(loss_mb)`` is exactly the single-process sum; only
floating-point summation order differs. Metrics weighted the same way are summed likewise.
The default process group (``torch.distributed.init_process_group``) is used unless a helper
is given a ``group``; the ray executor creates it with the accelerator record's backend
(gloo on CPU, nccl on GPU). A backend whose ranks are not all data-parallel peers (megatron:
tensor-parallel peers hold the same samples) sets its data-parallel group for the process
(:func:`set_data_parallel_group`: the run context's ``dp_group``); algorithm plugins pass
:func:`data_parallel_group` to these helpers, so a batch statistic counts every sample once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from slime_core.context import run_context


def set_data_parallel_group(group: Any) -> None:
    """Set this process's data-parallel group (``None``: the default group, all ranks), the
    run context's ``dp_group``. The trainer backend calls it in its rank's process, before any
    hook that reduces over data-parallel ranks (``slime_trainer_init``)."""
    run_context().dp_group = group


def data_parallel_group() -> Any:
    """The data-parallel group the trainer of this process set (``None``: the default group)."""
    return run_context().dp_group


def active(world_size: int, group: Any = None) -> bool:
    """True when ``world_size > 1`` and (with ``group``) that group has more than one rank;
    then the default process group must exist (and, without ``group``, have ``world_size``
    ranks)."""
    if world_size <= 1:
        return False
    import torch.distributed as dist

    if group is not None:
        return int(dist.get_world_size(group)) > 1
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"a trainer with world_size={world_size} needs torch.distributed initialised "
            "(the ray executor and the local executor's rank processes do this)"
        )
    if dist.get_world_size() != world_size:
        raise RuntimeError(
            f"trainer world_size={world_size} but the default process group has "
            f"{dist.get_world_size()} ranks"
        )
    return True


def global_totals(samples: float, tokens: float, device: Any,
                  group: Any = None) -> tuple[float, float]:
    """``(samples, tokens)`` summed over the ranks of ``group`` (``None``: the default group;
    float64, so token counts stay exact)."""
    import torch.distributed as dist

    t = torch.tensor([samples, tokens], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return float(t[0]), float(t[1])


def all_reduce_gradients(params: list[torch.nn.Parameter], group: Any = None) -> None:
    """Sum ``.grad`` over the ranks of ``group`` (``None``: the default group), one flat buffer per dtype (a missing grad counts as zero, so
    a rank whose share did not touch a parameter still joins the collective). A parameter
    that has no gradient on any rank keeps ``grad = None``, as on one process, so the
    optimizer skips it (no moment update, no weight decay)."""
    import torch.distributed as dist

    trainable = [p for p in params if p.requires_grad]
    if not trainable:
        return
    device = trainable[0].device
    present = torch.tensor([p.grad is not None for p in trainable], dtype=torch.float32,
                           device=device)
    dist.all_reduce(present, op=dist.ReduceOp.SUM, group=group)
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for p, seen in zip(trainable, present.tolist(), strict=True):
        if not seen:
            p.grad = None
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        by_dtype.setdefault(p.grad.dtype, []).append(p)
    for dtype in sorted(by_dtype, key=str):  # same order on every rank
        same = by_dtype[dtype]
        # every one is set: a missing present gradient became zeros above
        flat = torch.cat([p.grad.reshape(-1) for p in same if p.grad is not None])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
        offset = 0
        for p in same:
            g = p.grad
            assert g is not None
            n = g.numel()
            g.copy_(flat[offset:offset + n].view_as(g))
            offset += n


def float_all_sum(world_size: int,
                  group: Any = None) -> Callable[[list[float]], list[float]] | None:
    """A callback summing a list of floats over the ranks of ``group`` (``None``: the default
    group; the callback is ``None`` on one rank), for batch-wide statistics such as advantage
    whitening. Like :func:`sum_metrics` it gathers Python objects, so it works on every
    backend without naming a device; every rank of the group must call it equally often."""
    if not active(world_size, group):
        return None

    def all_sum(values: list[float]) -> list[float]:
        totals = sum_metrics({str(i): float(v) for i, v in enumerate(values)}, group)
        return [totals[str(i)] for i in range(len(values))]

    return all_sum


def sum_metrics(metrics: dict[str, float], group: Any = None) -> dict[str, float]:
    """Sum each key over the ranks of ``group`` (``None``: the default group; keys missing on
    a rank count as 0: an empty share)."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, metrics, group=group)
    out: dict[str, float] = {}
    for m in gathered:
        for k, v in (m or {}).items():
            out[k] = out.get(k, 0.0) + float(v)
    return out
