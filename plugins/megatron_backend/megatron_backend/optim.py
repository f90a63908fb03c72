"""One optimizer step over micro-batches on a tensor- and data-parallel GPTModel.

The same weighting as the core's ``Accumulation`` (each micro-batch's loss at its share of the
mini-batch's loss-masked tokens or samples, the shares of the totals over data-parallel
ranks), with the reductions over Megatron's groups instead of the default one: totals,
gradients and metrics are summed over the **data-parallel** group (tensor-parallel peers hold
the same samples); the gradient norm of the whole model and the clip are :mod:`norm`'s.

Training health as the core's: a non-finite loss (on the last stage) or gradient norm skips
the optimizer step (``slime_core.api.TrainingHealth``); the flags are agreed over **every**
rank, since only the last pipeline stage sees the loss and data-parallel ranks see different
samples.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, cast

import torch
import torch.distributed as dist
from slime_core.api import TrainingHealth, all_reduce_gradients, global_totals, sum_metrics

from megatron_backend import norm, parallel
from megatron_backend.convert import tp_partial_grad
from megatron_backend.zero import DistributedAdamW


def grad_norm(params: dict[str, torch.Tensor], sharded_names: set[str],
              skip: frozenset[str] = frozenset(), pp_group: Any = None,
              expert_names: Collection[str] = frozenset()) -> float:
    """L2 norm of the gradients of the whole (unsharded) model, on every rank (:mod:`norm`).
    ``skip``: tensors that are copies of another stage's (the last stage's tied output
    weight); ``pp_group``: the stages' squares are summed over it; ``expert_names``: tensors
    split over the expert-parallel group."""
    device = next(iter(params.values())).device if params else torch.device("cpu")
    grads = ((name, p.grad) for name, p in params.items()
             if p.grad is not None and name not in skip)
    return norm.model_norm(norm.squares(grads, sharded_names, device, expert_names), pp_group)


def sum_partial_grads(named: dict[str, torch.Tensor]) -> None:
    """Sum over the TP group the gradients each TP rank holds only its heads' part of
    (:func:`~megatron_backend.convert.tp_partial_grad`: Qwen3's q/k norms), one flat buffer;
    every TP rank holds the same names, so every rank joins."""
    if parallel.tp_size() == 1:
        return
    params = [p for n, p in named.items() if tp_partial_grad(n) and p.requires_grad]
    if not params:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([cast(torch.Tensor, p.grad).reshape(-1) for p in params])
    dist.all_reduce(flat, group=parallel.tp_group())
    offset = 0
    for p in params:
        g = cast(torch.Tensor, p.grad)
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def health(device: Any) -> TrainingHealth:
    """The non-finite checks of this rank, agreed over every rank of the default group (the
    loss is only on the last stage; data-parallel ranks hold different samples)."""
    return TrainingHealth(device, None, dist.is_initialized() and dist.get_world_size() > 1)


class Accumulation:
    """Weighted backward passes of one optimizer step, then the reduced, clipped step; after
    :meth:`step`, ``applied`` says whether the optimizer stepped and ``skipped`` holds the
    skip metrics (empty when it stepped)."""

    def __init__(self, samples: float, tokens: float, device: Any = "cpu") -> None:
        self.dp = parallel.dp_size() > 1
        if self.dp:  # on the rank's device: an nccl group reduces device tensors only
            samples, tokens = global_totals(samples, tokens, device, parallel.dp_group())
        self.total_samples = samples
        self.total_tokens = tokens or 1.0
        self.metrics: dict[str, float] = {}
        self.health = health(device)
        self.applied = False
        self.skipped: dict[str, float] = {}

    def backward(self, loss: torch.Tensor, metrics: dict[str, float], weighting: str,
                 samples: int, tokens: float) -> None:
        self.health.watch_loss(loss)
        w = tokens / self.total_tokens if weighting == "tokens" else samples / self.total_samples
        (loss * w).backward()
        for k, v in metrics.items():
            self.metrics[k] = self.metrics.get(k, 0.0) + float(v) * w

    def step(self, named: dict[str, torch.Tensor], sharded_names: set[str],
             optimizer: torch.optim.Optimizer, grad_clip: float,
             stages: Any = None, tied: str | None = None,
             expert_names: Collection[str] = frozenset()) -> tuple[dict[str, float], float]:
        """All-reduce over data-parallel ranks, clip by the full model's norm, step; the
        metrics and the norm before clipping.

        With several pipeline stages (``stages``): the metrics are the last stage's; ``tied``
        names this stage's copy of tied embeddings (first stage: the embedding, last: the
        output weight), whose gradients are summed over Megatron's embedding group so both
        copies take the same step; the last stage's copy is left out of the norm. With expert
        parallelism, ``expert_names`` (this rank's experts) are summed over the
        expert-data-parallel group instead of the data-parallel one (their gradients already
        hold every data-parallel rank's tokens: the token dispatcher brought them here) and
        their squares over the expert tensor x expert parallel group. A non-finite loss or norm
        (on any rank)
        skips the clip and the step."""
        params = list(named.values())
        metrics = self.metrics
        sum_partial_grads(named)
        piped = stages is not None and stages.size > 1
        if piped:
            metrics = stages.broadcast_from_last(metrics)
        skip: frozenset[str] = frozenset()
        if piped and tied is not None:
            from megatron.core import parallel_state as ps

            p = named[tied]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=ps.get_embedding_group())
            if stages.last:
                skip = frozenset({tied})
        if isinstance(optimizer, DistributedAdamW):  # ZeRO-1: reduce-scatter, step, gather
            if self.dp:
                metrics = sum_metrics(metrics, parallel.dp_group())
            total = optimizer.reduce_clip_step(sharded_names, skip,
                                               stages.group if piped else None, grad_clip,
                                               should_step=self._should_step)
            return metrics, total
        if self.dp:
            # the core's reduction over the data-parallel group: one flat buffer per dtype,
            # a parameter no rank has a gradient for keeps None (AdamW skips it)
            group = parallel.dp_group()
            dense = [p for n, p in named.items() if n not in expert_names]
            all_reduce_gradients(cast(list[torch.nn.Parameter], dense), group)
            metrics = sum_metrics(metrics, group)
        if expert_names and dist.get_world_size(parallel.expert_dp_group()) > 1:
            experts = [p for n, p in named.items() if n in expert_names]
            all_reduce_gradients(cast(list[torch.nn.Parameter], experts),
                                 parallel.expert_dp_group())
        total = grad_norm(named, sharded_names, skip, stages.group if piped else None,
                          expert_names)
        if self._should_step(total):
            norm.clip_((p.grad for p in params), total, grad_clip)
            optimizer.step()
        return metrics, total

    def _should_step(self, total: float) -> bool:
        """The agreed verdict on this step (a collective of every rank)."""
        self.skipped = self.health.check_step(total)
        self.applied = not self.skipped
        return self.applied
