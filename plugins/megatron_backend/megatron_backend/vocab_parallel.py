"""Log-probs and entropies over a vocabulary split across tensor-parallel ranks.

With ``parallel_output=True`` GPTModel leaves each TP rank with its slice of the logits,
``[..., padded_vocab / tp]``, instead of gathering the whole vocabulary on every rank (the
gathered logits were the largest activation of a step). The softmax's statistics are
reduced over the TP group instead: the max and the sum of exponentials (log-sum-exp), the
target token's logit from the rank whose slice holds it, and for the entropy the sum of
``p * z``. Only the slice is ever held in fp32.

Backward needs no communication: every TP rank computes the same (replicated) loss, so the
gradient with respect to its own slice is complete, and the output layer's backward
all-reduces the gradient of its input as for any column-parallel layer. With
``z`` the (temperature-scaled) logits, ``p = softmax(z)``, ``t`` the target:

    d log p_t / d z_k = [k == t] - p_k
    d H / d z_k       = -p_k * (log p_k + H)        (H = -sum p log p)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _all_reduce(t: torch.Tensor, op: Any, group: Any) -> torch.Tensor:
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=op, group=group)
    return t


class _VocabParallelLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, target: torch.Tensor, start: int, valid: int,
                with_entropy: bool, group: Any) -> tuple[torch.Tensor, torch.Tensor]:
        # z: [N, V_local] fp32 (this rank's columns start .. start + V_local); columns at or
        # beyond ``valid`` are Megatron's vocabulary padding and take no probability
        n, width = z.shape
        cols = torch.arange(width, device=z.device)
        pad = cols >= valid  # padding columns of this slice
        z = z.masked_fill(pad, float("-inf")) if bool(pad.any()) else z
        m = z.max(dim=-1).values
        _all_reduce(m, dist.ReduceOp.MAX, group)
        sum_exp = torch.exp(z - m[:, None]).sum(-1)
        _all_reduce(sum_exp, dist.ReduceOp.SUM, group)
        lse = m + torch.log(sum_exp)
        local_t = target - start
        mine = (local_t >= 0) & (local_t < width)
        idx = local_t.clamp(0, width - 1)
        z_t = torch.where(mine, z.gather(-1, idx[:, None]).squeeze(-1), torch.zeros_like(m))
        _all_reduce(z_t, dist.ReduceOp.SUM, group)
        logp_t = z_t - lse
        if with_entropy:
            p = torch.exp(z - lse[:, None])
            pz = torch.where(pad, torch.zeros_like(z), p * z).sum(-1)
            _all_reduce(pz, dist.ReduceOp.SUM, group)
            entropy = lse - pz
        else:
            entropy = torch.zeros_like(logp_t)
        ctx.save_for_backward(z, lse, idx, mine, entropy)
        ctx.with_entropy = with_entropy
        return logp_t, entropy

    @staticmethod
    def backward(ctx: Any, g_lp: torch.Tensor | None,
                 g_ent: torch.Tensor | None) -> tuple[Any, ...]:
        z, lse, idx, mine, entropy = ctx.saved_tensors
        p = torch.exp(z - lse[:, None])  # recomputed: the slice's probabilities (0 on padding)
        grad = torch.zeros_like(z)
        if g_lp is not None:
            grad -= g_lp[:, None] * p
            grad.scatter_add_(-1, idx[:, None], (g_lp * mine.to(g_lp.dtype))[:, None])
        if g_ent is not None and ctx.with_entropy:
            logp = torch.where(p > 0, z - lse[:, None], torch.zeros_like(z))
            grad -= g_ent[:, None] * p * (logp + entropy[:, None])
        return grad, None, None, None, None, None


def log_probs_and_entropy(z: torch.Tensor, target: torch.Tensor, start: int, valid: int,
                          with_entropy: bool, group: Any
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log p(target)`` and (``with_entropy``) the entropy of ``softmax(z)`` over the whole
    vocabulary, from this rank's columns ``z`` (``[N, V_local]``, fp32) of it.

    ``start``: the vocabulary index of this slice's first column; ``valid``: how many of its
    columns are real tokens (the rest is padding); ``group``: the tensor-parallel group
    (``None`` or one rank: the plain log-softmax). Differentiable in ``z``; a collective over
    ``group`` (every rank of it calls it with its own slice, the same ``target``).
    """
    lp, ent = _VocabParallelLogProbs.apply(z, target, start, valid, with_entropy, group)
    return lp, (ent if with_entropy else None)
