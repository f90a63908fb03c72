"""One optimizer step accumulated over micro-batches, the same for every model a trainer steps
(the policy, a PPO critic).

The step's mini-batch is split into micro-batches by token budget. Each micro-batch's loss is
weighted by its share of the mini-batch (of loss-masked tokens or of samples, as its reducer
says), so the summed gradient equals that of the whole mini-batch at once. Under data
parallelism the shares are of the totals over every rank and the gradients are summed over
ranks before clipping (:mod:`slime_core.trainkit.data_parallel`), so each rank takes the
single-process step.

Training health (:mod:`slime_core.trainkit.health`): a rollout whose batch holds a non-finite
reward or advantage takes no optimizer step; an optimizer step whose loss or gradient norm is
non-finite is not taken (:attr:`Accumulation.applied`), and the ranks agree on both.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch

from slime_core.trainkit import data_parallel
from slime_core.trainkit.flat import flat_cat
from slime_core.trainkit.health import SKIPPED_STEPS, TrainingHealth, finish_step_metrics


def masked_tokens(loss_masks: list[Any]) -> float:
    """The number of loss-masked tokens of per-sample masks (their summed values): what
    :class:`Accumulation` and :meth:`Accumulation.backward` take as ``tokens``. One sum over
    the packed masks when they share a device, not one operator (and, on a GPU, one host
    sync) per sample."""
    masks = [m if isinstance(m, torch.Tensor) else torch.as_tensor(m, dtype=torch.float32)
             for m in loss_masks]
    if not masks:
        return 0.0
    if len({m.device for m in masks}) > 1:
        return sum(float(m.sum()) for m in masks)
    return float(flat_cat(masks).sum(dtype=torch.float64))


def step_indices(n: int, n_steps: int) -> list[list[int]]:
    """Sample indices of each optimizer step of a rollout: sample ``i`` goes to step
    ``i % n_steps``."""
    order = list(range(n))
    return [order[i::n_steps] for i in range(n_steps)] if n_steps > 1 else [order]


def rollout_optimizer_steps(manager: Any, config: Any, batch: Any, rollout_id: int,
                            step: Callable[[Any], dict[str, float]], *, model: Any,
                            optimizer: Any, scheduler: Any, started: float,
                            health: TrainingHealth | None = None) -> dict[str, float]:
    """Every optimizer step of one rollout's (prepared) batch, as each trainer backend runs them.

    For each step of :func:`step_indices` (``train.num_steps_per_rollout``), fires
    ``slime_before_train_step`` with ``model``, ``optimizer`` and ``scheduler`` (what the backend
    passes: a module, or a list of model chunks), then calls ``step(mini_batch)`` for the step's
    metrics. Returns each metric averaged over the steps that reported it, the metrics the batch
    collected while it was prepared (``batch.metadata["metrics"]``, e.g. a critic's update),
    ``perf/train_tokens_per_s`` (all tokens of the batch over the time since ``started``, a
    ``time.perf_counter()`` value) and ``train/lr`` (the scheduler's first group's rate).

    ``health`` (every backend of this repository passes one): the batch's rewards and
    advantages are checked first (a collective over the health's group); when one is
    non-finite on any rank no step runs, no ``slime_before_train_step`` fires, and the metrics
    say so (``train/skipped_steps`` = the number of steps, ``train/nonfinite_*``). A step's own
    ``train/skipped_steps`` (what ``step`` reports when it did not apply its update) is summed
    over the steps, not averaged; it is 0.0 on a healthy rollout.
    """
    n_steps = config.train.num_steps_per_rollout
    if health is not None and (skip := health.check_batch(batch)):
        metrics = {**skip, SKIPPED_STEPS: float(n_steps)}
        metrics.update({k: float(v) for k, v in batch.metadata.get("metrics", {}).items()})
        metrics["perf/train_tokens_per_s"] = 0.0
        metrics["train/lr"] = float(scheduler.get_last_lr()[0])
        return metrics
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    tokens = 0
    for step_id, idx in enumerate(step_indices(len(batch), n_steps)):
        manager.hook.slime_before_train_step(
            config=config, rollout_id=rollout_id, step_id=step_id, model=model,
            optimizer=optimizer, scheduler=scheduler,
        )
        for k, v in step(batch.select(idx)).items():
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + 1
        tokens += sum(int(len(batch.tokens[i])) for i in idx)
    metrics = finish_step_metrics(sums, counts)
    metrics.update({k: float(v) for k, v in batch.metadata.get("metrics", {}).items()})
    elapsed = time.perf_counter() - started
    metrics["perf/train_tokens_per_s"] = tokens / elapsed if elapsed > 0 else 0.0
    metrics["train/lr"] = float(scheduler.get_last_lr()[0])
    return metrics


class Accumulation:
    """Weighted backward passes of one optimizer step, then the (all-reduced, clipped) step.

    ``samples`` and ``tokens`` are this rank's mini-batch totals (samples, loss-masked
    tokens); with ``data_parallel`` they are summed over the ranks of ``group`` (``None``:
    the default group) here, a collective every rank of it must join; the step sums
    gradients and metrics over the same group. After :meth:`step`, :attr:`applied` says
    whether the optimizer stepped and :attr:`skipped` holds the skip metrics
    (:mod:`~slime_core.trainkit.health`; empty when it stepped)."""

    def __init__(self, samples: float, tokens: float, data_parallel_: bool, device: Any,
                 group: Any = None) -> None:
        self.data_parallel = data_parallel_
        self.group = group
        if data_parallel_:
            samples, tokens = data_parallel.global_totals(samples, tokens, device, group)
        self.total_samples = samples
        self.total_tokens = tokens or 1.0
        self.device = device
        self.metrics: dict[str, float] = {}
        self.health = TrainingHealth(device, group, data_parallel_)
        self.applied = False
        self.skipped: dict[str, float] = {}

    def restarted(self) -> Accumulation:
        """The same optimizer step from its first micro-batch again (the totals kept, so no
        collective runs: other data-parallel ranks are not asked twice); the caller zeroes the
        gradients. For a step whose micro-batches must be run again before :meth:`step`."""
        fresh = copy.copy(self)
        fresh.metrics, fresh.skipped, fresh.applied = {}, {}, False
        fresh.health = TrainingHealth(self.device, self.group, self.data_parallel)
        return fresh

    def backward(self, loss: torch.Tensor, metrics: dict[str, float], weighting: str,
                 samples: int, tokens: float) -> None:
        """Back-propagate one micro-batch's loss at its share (``weighting``: ``"tokens"`` or
        ``"samples"``) and add its metrics at the same share."""
        self.health.watch_loss(loss)
        if weighting == "tokens":
            w = tokens / self.total_tokens
        else:
            w = samples / self.total_samples
        (loss * w).backward()
        for k, v in metrics.items():
            self.metrics[k] = self.metrics.get(k, 0.0) + float(v) * w

    def step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             grad_clip: float) -> tuple[dict[str, float], float]:
        """Sum gradients and metrics over ranks, clip (0: no clip), take the optimizer step;
        the step's metrics and the gradient norm before clipping. A non-finite loss (any
        micro-batch, any rank) or gradient norm skips the optimizer step: :attr:`applied` is
        then False and :attr:`skipped` says why."""
        params = list(model.parameters())
        metrics = self.metrics
        if self.data_parallel:
            data_parallel.all_reduce_gradients(params, self.group)
            metrics = data_parallel.sum_metrics(metrics, self.group)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip or float("inf"))
        self.skipped = self.health.check_step(grad_norm)
        self.applied = not self.skipped
        if self.applied:
            optimizer.step()
        return metrics, float(grad_norm)
