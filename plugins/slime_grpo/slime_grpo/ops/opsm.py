"""Off-Policy Sequence Masking (OPSM, DeepSeek-V3.2; slime's ``--use-opsm``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ._batch import float_masks, lengths_of

OPSM_DELTA = 1e-4


@torch.no_grad()
def opsm_mask(
    log_probs: Sequence[Tensor],
    old_log_probs: Sequence[Tensor],
    advantages: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    opsm_delta: float = OPSM_DELTA,
) -> tuple[list[Tensor], dict[str, Tensor]]:
    """Keep-mask that drops negative-advantage tokens of sequences that drifted too far.

    Rule (slime's ``compute_opsm_mask``)::

        seq_kl_i = sum_t m_it (old_logp_it - logp_it) / max(sum_t m_it, 1)   # k1, masked mean
        drop_it  = (A_it < 0) and (seq_kl_i > opsm_delta)
        keep_it  = 1 - drop_it

    ``old_log_probs`` are the log-probs the sample was generated with: the rollout engine's when
    training uses rollout log-probs, otherwise the trainer's old log-probs (slime picks the
    same tensor it uses for the PPO ratio; TRL uses the rollout ones when it has them). The test
    ``A_it < 0`` is per token, so with sequence-level advantages a whole sequence is dropped.
    No gradient (``log_probs`` are read detached). Multiply the per-token policy loss by the
    mask; it does not change the reducer's denominators.

    Returns ``(keep [T_i] float list, {"opsm_clipfrac": fraction of loss-masked tokens dropped})``
    (slime reports a per-sample sum of that fraction instead of a mean).
    """
    masks = float_masks(loss_masks)
    if not (
        lengths_of(log_probs)
        == lengths_of(old_log_probs)
        == lengths_of(advantages)
        == lengths_of(masks)
    ):
        raise ValueError("opsm_mask: per-sample lengths of the inputs differ")
    keeps: list[Tensor] = []
    dropped: list[Tensor] = []
    total: list[Tensor] = []
    for lp, old, adv, m in zip(log_probs, old_log_probs, advantages, masks, strict=True):
        m = m.to(lp.device, torch.float32)
        seq_kl = ((old.float() - lp.detach().float()) * m).sum() / torch.clamp_min(m.sum(), 1.0)
        drop = (adv < 0) & (seq_kl > opsm_delta)
        keeps.append(1.0 - drop.float())
        dropped.append((drop.float() * m).sum())
        total.append(m.sum())
    if not keeps:
        return keeps, {"opsm_clipfrac": torch.zeros(())}
    frac = torch.stack(dropped).sum() / torch.clamp_min(torch.stack(total).sum(), 1.0)
    return keeps, {"opsm_clipfrac": frac}
