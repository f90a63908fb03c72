"""Entropy bonus and supervised (SFT) loss on loss-masked response tokens."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .aggregation import DEFAULT_LOSS_AGG_MODE, get_reducer

Reducer = Callable[[Sequence[Tensor] | Tensor], Tensor]


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Categorical entropy per position: ``H_t = logsumexp(z_t) - sum_v softmax(z_t)_v z_tv``.

    ``logits``: ``[T, V]`` (any leading shape ``[..., V]``) -> ``[T]`` (``[...]``), float32,
    differentiable. Apply the sampling temperature to the logits first if the log-probs use it.
    """
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


def entropy_bonus(
    entropy: Sequence[Tensor] | Tensor, reducer: Reducer, entropy_coef: float
) -> Tensor:
    """Loss term ``-entropy_coef * reducer(entropy)``, to be added to the policy loss.

    As slime: ``loss = pg_loss - entropy_coef * reduce(H)``, with ``H`` the per-token entropy
    reduced by the same reducer as the policy loss. Returns a 0-dim tensor.
    """
    return -entropy_coef * reducer(entropy)


def sft_loss(
    log_probs: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    reducer: Reducer | None = None,
) -> Tensor:
    """Negative log-likelihood of the loss-masked response tokens: ``reduce(-log_probs)``.

    ``log_probs``: per-sample ``[T_i]`` log-probs of the target tokens (with grad).
    ``reducer``: defaults to ``get_reducer("seq_mean_token_mean", ...)`` built from
    ``loss_masks`` (slime's default: mean over each sample's masked tokens, then over samples;
    a sample with no masked token contributes 0 and still counts). Returns a 0-dim tensor.
    """
    if reducer is None:
        reducer = get_reducer(
            DEFAULT_LOSS_AGG_MODE, [int(t.numel()) for t in log_probs], loss_masks
        )
    return reducer([-lp for lp in log_probs])
