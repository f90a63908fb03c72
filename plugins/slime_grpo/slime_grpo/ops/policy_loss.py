"""Policy losses: PPO clip (with clip-higher and dual clip), GSPO and CISPO.

Common signature: per-sample lists of ``[T_i]`` tensors ``log_probs`` (current policy, with
grad), ``old_log_probs`` (behaviour / old policy, no grad), ``advantages`` and ``loss_masks``.
Each returns ``(per_token_loss, metrics)``: ``per_token_loss`` is a list of ``[T_i]`` tensors
carrying the graph (reduce it with a reducer from ``aggregation.get_reducer``); ``metrics`` is
a dict of detached 0-dim tensors. A metric is the token mean over loss-masked tokens of the
batch, or ``metric_reducer(list_of_per_token_values)`` when a reducer is given (slime reduces
its metrics with the same per-sample-mean reducer as the loss).

Conventions (slime's ``compute_policy_loss``):

* ratio = exp(log_probs - old_log_probs), **no clamp** on the log-ratio by default (verl and
  OpenRLHF clamp it to [-20, 20]: ``log_ratio_clamp=20``, ``algorithm.log_ratio_clamp``);
* ``eps_clip_high`` defaults to ``eps_clip`` (clip-higher when larger);
* dual clip only when ``eps_clip_c`` is set (must be > 1); verl turns it on by default (3.0);
* ``pg_clipfrac``: fraction of tokens where the clipped branch is strictly larger than the
  unclipped one (clipping changed the value); ``pg_clipfrac_high`` / ``pg_clipfrac_low`` split it
  by side (ratio above 1 + eps_high with A > 0, below 1 - eps with A < 0); ``pg_clipfrac_dual``:
  tokens with A < 0 where the dual bound ``-A * c`` replaced the value;
* ``ppo_kl``: mean of (old_log_probs - log_probs) (slime's k1 metric).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._batch import float_masks, lengths_of, pack, pack_masks, packed_masked_mean, unpack

MetricReducer = Callable[[Sequence[Tensor]], Tensor]
PolicyLossFn = Callable[..., tuple[list[Tensor], dict[str, Tensor]]]


def _check_inputs(log_probs: Sequence[Tensor], *others: Sequence[Tensor]) -> list[int]:
    lengths = lengths_of(log_probs)
    for other in others:
        if lengths_of(other) != lengths:
            raise ValueError(f"per-sample lengths differ: {lengths} vs {lengths_of(other)}")
    return lengths


def _metrics(
    values: dict[str, Tensor],
    lengths: list[int],
    masks: list[Tensor],
    metric_reducer: MetricReducer | None,
) -> dict[str, Tensor]:
    if metric_reducer is not None:
        return {name: metric_reducer(unpack(packed.detach().float(), lengths)).detach()
                for name, packed in values.items()}
    if not values:
        return {}
    # the token means of every metric in one product over the packed batch
    stacked = torch.stack([packed.detach().float() for packed in values.values()])
    means = packed_masked_mean(stacked, pack_masks(masks, stacked.device))
    return dict(zip(values, means.unbind(0), strict=True))


def _clamped(log_ratio: Tensor, bound: float | None) -> Tensor:
    return log_ratio if bound is None else log_ratio.clamp(min=-bound, max=bound)


def clipped_surrogate(
    ratio: Tensor,
    advantages: Tensor,
    eps_clip: float,
    eps_clip_high: float | None = None,
    eps_clip_c: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Element-wise PPO clipped surrogate on packed tensors (any shape, all the same).

    ``L1 = -A * ratio``, ``L2 = -A * clip(ratio, 1 - eps_clip, 1 + eps_clip_high)``,
    ``L = max(L1, L2)``; with dual clip (``eps_clip_c = c > 1``): for A < 0,
    ``L = min(max(L1, L2), -A * c)``. Returns ``(L, indicators)`` where the indicators are float
    0/1 tensors ``clipped``, ``clipped_high``, ``clipped_low``, ``dual_clipped``.
    """
    if eps_clip_high is None:
        eps_clip_high = eps_clip
    if eps_clip_c is not None and not eps_clip_c > 1.0:
        raise ValueError(f"eps_clip_c (dual-clip lower bound) must be > 1.0, got {eps_clip_c}")
    loss1 = -advantages * ratio
    loss2 = -advantages * ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip_high)
    loss = torch.maximum(loss1, loss2)
    clipped = loss2 > loss1
    dual = torch.zeros_like(clipped)
    if eps_clip_c is not None:
        loss3 = -advantages * eps_clip_c
        dual = (advantages < 0) & (loss > loss3)
        loss = torch.where(advantages < 0, torch.minimum(loss, loss3), loss)
    with torch.no_grad():
        high = clipped & (ratio > 1.0 + eps_clip_high)
        low = clipped & (ratio < 1.0 - eps_clip)
    return loss, {
        "clipped": clipped.float(),
        "clipped_high": high.float(),
        "clipped_low": low.float(),
        "dual_clipped": dual.float(),
    }


def _clip_metrics(ind: dict[str, Tensor]) -> dict[str, Tensor]:
    return {
        "pg_clipfrac": ind["clipped"],
        "pg_clipfrac_high": ind["clipped_high"],
        "pg_clipfrac_low": ind["clipped_low"],
        "pg_clipfrac_dual": ind["dual_clipped"],
    }


def ppo_clip_loss(
    log_probs: Sequence[Tensor],
    old_log_probs: Sequence[Tensor],
    advantages: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    eps_clip: float = 0.2,
    eps_clip_high: float | None = None,
    eps_clip_c: float | None = None,
    metric_reducer: MetricReducer | None = None,
    log_ratio_clamp: float | None = None,
) -> tuple[list[Tensor], dict[str, Tensor]]:
    """Token-level PPO clipped loss (GRPO / Dr. GRPO / REINFORCE++ / PPO actor).

    ``ratio_t = exp(logp_t - old_logp_t)`` (no clamp unless ``log_ratio_clamp = c``: the
    log-ratio is clamped to ``[-c, c]`` first, verl's 20; ``ppo_kl`` uses the clamped value as
    verl does); ``L_t = max(-A_t ratio_t,
    -A_t clip(ratio_t, 1 - eps_clip, 1 + eps_clip_high))``; dual clip (``eps_clip_c`` set,
    > 1): ``L_t = min(L_t, -A_t eps_clip_c)`` where ``A_t < 0``.

    Returns ``(per_token_loss [T_i] list, metrics)`` with metrics ``pg_clipfrac``,
    ``pg_clipfrac_high``, ``pg_clipfrac_low``, ``pg_clipfrac_dual``, ``ppo_kl``.
    """
    lengths = _check_inputs(log_probs, old_log_probs, advantages, loss_masks)
    lp, old, adv = pack(log_probs), pack(old_log_probs), pack(advantages)
    log_ratio = _clamped(lp - old.detach(), log_ratio_clamp)
    loss, ind = clipped_surrogate(
        torch.exp(log_ratio), adv.detach(), eps_clip, eps_clip_high, eps_clip_c
    )
    masks = float_masks(loss_masks)
    metrics = _metrics({**_clip_metrics(ind), "ppo_kl": -log_ratio}, lengths, masks, metric_reducer)
    return unpack(loss, lengths), metrics


def gspo_loss(
    log_probs: Sequence[Tensor],
    old_log_probs: Sequence[Tensor],
    advantages: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    eps_clip: float = 0.2,
    eps_clip_high: float | None = None,
    eps_clip_c: float | None = None,
    token_level: bool = False,
    metric_reducer: MetricReducer | None = None,
) -> tuple[list[Tensor], dict[str, Tensor]]:
    """GSPO (https://arxiv.org/abs/2507.18071): the PPO clip on a sequence-level ratio.

    ``log s_i = sum_t m_it (logp_it - old_logp_it) / max(sum_t m_it, 1)`` (geometric mean of the
    token ratios over loss-masked tokens), ``s_i = exp(log s_i)``, no clamp (verl clamps
    ``log s`` at 10). The ratio used on token t is:

    * ``token_level=False`` (slime): ``s_i`` itself, broadcast; its gradient reaches every
      loss-masked token, ``d s_i / d logp_it = s_i m_it / |y_i|``;
    * ``token_level=True`` (GSPO-token): ``s_it = sg[s_i] * pi(y_t) / sg[pi(y_t)]``, i.e.
      ``exp(sg[log s_i] + logp_it - sg[logp_it])``: value ``s_i``, gradient ``s_i`` on token t only.

    Both give the same loss value, and the same gradient once reduced per sequence with
    ``seq_mean_token_mean`` and sequence-level advantages. Clipping (``eps_clip``,
    ``eps_clip_high``, optional dual ``eps_clip_c``) is ``clipped_surrogate`` on the broadcast
    ratio, so a clipped sequence is clipped on all its tokens. Use small clip ranges (the paper
    uses 3e-4 / 4e-4). Metrics as ``ppo_clip_loss``; ``ppo_kl`` is the per-sequence value.
    """
    lengths = _check_inputs(log_probs, old_log_probs, advantages, loss_masks)
    masks = float_masks(loss_masks)
    ratios = []
    for lp, old, m in zip(log_probs, old_log_probs, masks, strict=True):
        m = m.to(lp.device, lp.dtype)
        seq_log_ratio = ((lp - old.detach()) * m).sum() / torch.clamp_min(m.sum(), 1.0)
        if token_level:
            ratios.append(seq_log_ratio.detach() + lp - lp.detach())
        else:
            ratios.append(seq_log_ratio.expand(lp.shape))
    log_ratio = pack(ratios)
    loss, ind = clipped_surrogate(
        torch.exp(log_ratio), pack(advantages).detach(), eps_clip, eps_clip_high, eps_clip_c
    )
    metrics = _metrics({**_clip_metrics(ind), "ppo_kl": -log_ratio}, lengths, masks, metric_reducer)
    return unpack(loss, lengths), metrics


def cispo_loss(
    log_probs: Sequence[Tensor],
    old_log_probs: Sequence[Tensor],
    advantages: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    eps_clip_high: float = 0.2,
    eps_clip: float | None = None,
    metric_reducer: MetricReducer | None = None,
    log_ratio_clamp: float | None = None,
) -> tuple[list[Tensor], dict[str, Tensor]]:
    """CISPO (MiniMax-M1, https://arxiv.org/abs/2506.13585, eq. 4-5).

    ``w_t = sg(clip(ratio_t, max=1 + eps_clip_high))`` with ``ratio_t = exp(logp_t - old_logp_t)``;
    ``L_t = -w_t * A_t * logp_t``. The weight carries no gradient; the gradient flows through
    ``logp_t`` on every token, clipped or not. ``eps_clip`` (default None) adds the lower bound
    ``1 - eps_clip``: canonical CISPO has none; slime passes its ``--eps-clip`` (default 0.2)
    there, so pass ``eps_clip=0.2`` to reproduce slime's defaults. TRL's ``cispo`` clamps at
    ``epsilon_high`` itself (an absolute bound, not ``1 + eps``).

    ``log_ratio_clamp = c`` clamps the log-ratio to ``[-c, c]`` before ``exp`` (verl: 20).

    Metrics: ``pg_clipfrac`` (w != ratio), ``pg_clipfrac_high``, ``pg_clipfrac_low``, ``ppo_kl``.
    """
    lengths = _check_inputs(log_probs, old_log_probs, advantages, loss_masks)
    lp, old, adv = pack(log_probs), pack(old_log_probs), pack(advantages)
    log_ratio = _clamped(lp - old.detach(), log_ratio_clamp)
    ratio = torch.exp(log_ratio).detach()
    low = None if eps_clip is None else 1.0 - eps_clip
    weight = ratio.clamp(min=low, max=1.0 + eps_clip_high)
    loss = -weight * adv.detach() * lp
    masks = float_masks(loss_masks)
    metrics = _metrics(
        {
            "pg_clipfrac": (weight != ratio).float(),
            "pg_clipfrac_high": (ratio > 1.0 + eps_clip_high).float(),
            "pg_clipfrac_low": (ratio < low).float()
            if low is not None
            else torch.zeros_like(ratio),
            "ppo_kl": -log_ratio,
        },
        lengths,
        masks,
        metric_reducer,
    )
    return unpack(loss, lengths), metrics


POLICY_LOSSES: dict[str, PolicyLossFn] = {
    "ppo": ppo_clip_loss,
    "gspo": gspo_loss,
    "cispo": cispo_loss,
}
"""Name -> policy loss. GRPO, Dr. GRPO, RLOO and REINFORCE++ all train with ``ppo``."""
