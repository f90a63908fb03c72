"""The ``gae`` advantage estimator on a TrainBatch: KL-shaped token rewards, GAE, whitening."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from slime_ppo import ops

KLFn = Callable[[Tensor, Tensor], Tensor]


def reward_kl(config: Any, batch: Any, kl_fn: KLFn | None) -> list[Tensor] | None:
    """Per-token KL of the sampling policy vs the reference, or ``None`` without KL in the reward.

    The sampling policy's log-probs are ``batch.old_log_probs`` when the trainer computed them
    (several optimizer steps per rollout), else ``batch.rollout_log_probs`` (the engine's).
    ``kl_fn`` is the ``algorithm.kl_estimator`` record's factory (``kl_fn(log_probs, ref)``).
    """
    alg = config.algorithm
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

    1. token rewards ``r_t = -algorithm.kl_in_reward_coef * kl_t * m_t`` plus the sample's
       scalar reward (``batch.rewards``) on its last loss-masked token (``ops.kl_in_reward``);
    2. GAE with ``algorithm.gamma`` / ``algorithm.lam`` over loss-masked tokens only
       (``ops.gae_advantages_and_returns``); ``returns = advantages + values``, unwhitened;
    3. when ``ppo.whiten_advantages``: advantages whitened over every loss-masked token of the
       batch (``ops.whiten``, Bessel variance, eps 1e-8); skipped when no token is masked in.

    Metrics (token means over loss-masked tokens): ``train/values_mean``,
    ``train/returns_mean``, ``train/advantages_mean`` (before whitening),
    ``train/explained_variance`` = ``1 - Var(R - V) / Var(R)`` (population variances; 0 when
    ``Var(R) = 0``), and ``train/kl_in_reward`` when the KL term is on.
    """
    alg = config.algorithm
    masks = [torch.as_tensor(m).float() for m in batch.loss_masks]
    values = [v.detach().float().cpu() for v in values]
    kl = reward_kl(config, batch, kl_fn)
    if kl is None:
        kl = [torch.zeros_like(v) for v in values]
    rewards = torch.as_tensor(batch.rewards, dtype=torch.float32)
    tok = ops.kl_in_reward(rewards, kl, masks, kl_coef=alg.kl_in_reward_coef)
    adv, ret = ops.gae_advantages_and_returns(tok, values, masks, gamma=alg.gamma, lam=alg.lam)
    metrics = _metrics(values, ret, adv, masks)
    if alg.kl_in_reward_coef:
        metrics["train/kl_in_reward"] = _masked_mean(kl, masks)
    if config.ppo.whiten_advantages and sum(float(m.sum()) for m in masks) > 0:
        adv = list(ops.whiten(adv, masks))
    return adv, ret, metrics


def _masked_mean(xs: list[Tensor], masks: list[Tensor]) -> float:
    n = sum(float(m.sum()) for m in masks)
    return (
        sum(float((x.float() * m).sum()) for x, m in zip(xs, masks, strict=True)) / n if n else 0.0
    )


def _metrics(
    values: list[Tensor], returns: list[Tensor], adv: list[Tensor], masks: list[Tensor]
) -> dict[str, float]:
    keep = torch.cat(masks).bool() if masks else torch.zeros(0, dtype=torch.bool)
    v = torch.cat(values)[keep] if values else torch.zeros(0)
    r = torch.cat(returns)[keep] if returns else torch.zeros(0)
    out = {
        "train/values_mean": _masked_mean(values, masks),
        "train/returns_mean": _masked_mean(returns, masks),
        "train/advantages_mean": _masked_mean(adv, masks),
    }
    var_r = float(r.var(unbiased=False)) if r.numel() else 0.0
    out["train/explained_variance"] = (
        1.0 - float((r - v).var(unbiased=False)) / var_r if var_r > 0 else 0.0
    )
    return out
