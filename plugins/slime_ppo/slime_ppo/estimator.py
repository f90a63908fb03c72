"""The ``gae`` advantage estimator on a TrainBatch: KL-shaped token rewards, GAE, whitening."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from slime_ppo import ops
from slime_ppo.config import algorithm

KLFn = Callable[[Tensor, Tensor], Tensor]


def reward_kl(config: Any, batch: Any, kl_fn: KLFn | None) -> list[Tensor] | None:
    """Per-token KL of the sampling policy vs the reference, or ``None`` without KL in the reward.

    The sampling policy's log-probs are ``batch.old_log_probs`` when the trainer computed them
    (several optimizer steps per rollout), else ``batch.rollout_log_probs`` (the engine's).
    ``kl_fn`` is the ``algorithm.kl_estimator`` record's factory (``kl_fn(log_probs, ref)``).
    """
    alg = algorithm(config)
    if alg.kl_in_reward_coef == 0:
        return None
    where = f"algorithm.kl_in_reward_coef = {alg.kl_in_reward_coef}"
    if batch.ref_log_probs is None:
        raise ValueError(f"gae: {where} needs batch.ref_log_probs (the reference log-probs)")
    lps = batch.old_log_probs if batch.old_log_probs is not None else batch.rollout_log_probs
    if lps is None:
        raise ValueError(
            f"gae: {where} needs the sampling log-probs: batch.old_log_probs or "
            "batch.rollout_log_probs (the engine returned none)"
        )
    if kl_fn is None:
        raise ValueError(f"gae: {where} needs a KL estimator (algorithm.kl_estimator)")
    return [
        kl_fn(torch.as_tensor(lp).float(), torch.as_tensor(ref).float()).detach()
        for lp, ref in zip(lps, batch.ref_log_probs, strict=True)
    ]


def gae_estimate(
    config: Any, batch: Any, values: list[Tensor], kl_fn: KLFn | None = None
) -> tuple[list[Tensor], list[Tensor], dict[str, float]]:
    """``(advantages, returns, metrics)`` for ``batch`` given the critic's ``values``.

    1. token rewards ``r_t = -algorithm.kl_in_reward_coef * kl_t`` (times ``m_t`` when
       ``ppo.kl_in_reward_masked``) plus the sample's scalar reward (``batch.rewards``) on its
       last loss-masked token, or on its last token when ``algorithm.masked_steps = "count"``
       (``ops.kl_in_reward``);
    2. GAE with ``algorithm.gamma`` / ``algorithm.lam`` over loss-masked tokens only
       (``masked_steps = "skip"``) or over every position (``"count"``, slime)
       (``ops.gae_advantages_and_returns``); ``returns = advantages + values``, unwhitened;
    3. when ``ppo.whiten_advantages`` or ``algorithm.whiten_advantages``: advantages whitened
       over every loss-masked token of the batch (``ops.whiten``, Bessel variance, eps 1e-8);
       skipped when no token is masked in.

    Metrics (token means over loss-masked tokens): ``train/values_mean``,
    ``train/returns_mean``, ``train/advantages_mean`` (before whitening),
    ``train/explained_variance`` = ``1 - Var(R - V) / Var(R)`` (population variances; 0 when
    ``Var(R) = 0``), and ``train/kl_in_reward`` when the KL term is on.

    Under data parallelism (``train.num_ranks > 1``) the whitening statistics and the metrics
    are those of the whole batch: their sums are added over the trainer ranks
    (:func:`slime_core.api.float_all_sum` over the trainer's data-parallel group, so
    tensor-parallel peers holding the same samples count them once); every rank must call
    this, also with an empty share.
    """
    from slime_core.api import data_parallel_group, float_all_sum

    dp_sum = float_all_sum(config.train.num_ranks, group=data_parallel_group())  # None: one rank
    alg = algorithm(config)
    masks = [torch.as_tensor(m).float() for m in batch.loss_masks]
    values = [v.detach().float().cpu() for v in values]
    kl = reward_kl(config, batch, kl_fn)
    if kl is None:
        kl = [torch.zeros_like(v) for v in values]
    rewards = torch.as_tensor(batch.rewards, dtype=torch.float32)
    # the slime preset: KL on every token, the reward on the last token, GAE over every
    # position; verl's: KL on model tokens, GAE skipping masked ones (docs/algorithms.md)
    skip = alg.masked_steps == "skip"
    tok = ops.kl_in_reward(rewards, kl, masks, kl_coef=alg.kl_in_reward_coef,
                           mask_kl=config.ppo.kl_in_reward_masked,
                           reward_on_last_token=not skip)
    adv, ret = ops.gae_advantages_and_returns(tok, values, masks, gamma=alg.gamma, lam=alg.lam,
                                              skip_masked=skip)
    metrics, n = _metrics(values, ret, adv, kl if alg.kl_in_reward_coef else None, masks,
                          dp_sum or _local)
    if (config.ppo.whiten_advantages or alg.whiten_advantages) and n > 0:
        adv = list(ops.whiten(adv, masks, all_sum=dp_sum))
    return adv, ret, metrics


def _local(values: list[float]) -> list[float]:
    return values


def _selected(xs: list[Tensor], keep: Tensor) -> Tensor:
    return torch.cat(xs).double()[keep] if xs else torch.zeros(0, dtype=torch.float64)


def _metrics(
    values: list[Tensor], returns: list[Tensor], adv: list[Tensor], kl: list[Tensor] | None,
    masks: list[Tensor], all_sum: Any,
) -> tuple[dict[str, float], float]:
    """Token means over loss-masked tokens and the explained variance (two passes: sums, then
    squared deviations from the means), plus the masked-token count; all over the ranks."""
    keep = torch.cat(masks).bool() if masks else torch.zeros(0, dtype=torch.bool)
    v, r, a = _selected(values, keep), _selected(returns, keep), _selected(adv, keep)
    k = _selected(kl, keep) if kl is not None else torch.zeros_like(v)
    n, sv, sr, sa, sk = all_sum([float(v.numel()), float(v.sum()), float(r.sum()),
                                 float(a.sum()), float(k.sum())])

    def mean(total: float) -> float:
        return total / n if n else 0.0

    mr, mrv = mean(sr), mean(sr - sv)
    dev_r, dev_rv = all_sum([float(((r - mr) ** 2).sum()), float(((r - v - mrv) ** 2).sum())])
    var_r = dev_r / n if n else 0.0
    out = {
        "train/values_mean": mean(sv),
        "train/returns_mean": mr,
        "train/advantages_mean": mean(sa),
        "train/explained_variance": 1.0 - (dev_rv / n) / var_r if var_r > 0 else 0.0,
    }
    if kl is not None:
        out["train/kl_in_reward"] = mean(sk)
    return out, n
