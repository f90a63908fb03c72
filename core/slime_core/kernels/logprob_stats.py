"""The log-prob head's per-row statistics and their gradient as Triton kernels.

:mod:`slime_core.trainkit.logprob_head` keeps a micro-batch's response logits ``[R, V]`` (the
model's dtype) and needs, per row, ``lse = logsumexp(z)``, ``logp[target] = z[target] - lse``
and the entropy ``H = lse - sum(softmax(z) z)`` with ``z = logits / T``; backward, ``dz = g_lp
(onehot - p) - g_H p (log p + H)`` written over the logits. The compiled torch functions made
several passes over fp32 chunks (29 ms statistics + 16 ms gradient a training step of the
anchor, against about 5 ms to read and write the bf16 logits once). Here the statistics are one
online-softmax pass that reads each row once (one program a row), and the gradient one pass
that reads a tile and writes it back in place (one program per row and tile). All arithmetic
is fp32, as in the torch functions (:func:`slime_core.trainkit.logprob_head._stats` /
``_grad``), so the values agree up to the order of the sums.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

STATS_BLOCK = 4096
GRAD_BLOCK = 4096


@functools.cache
def _kernels() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def stats_kernel(x_ptr, t_ptr, lp_ptr, lse_ptr, ent_ptr, s_x, vocab, inv_temp,
                     ENTROPY: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = x_ptr + row * s_x
        offs = tl.arange(0, BLOCK)
        m = tl.full((BLOCK,), float("-inf"), tl.float32)  # per-lane running max
        s = tl.zeros((BLOCK,), tl.float32)  # per-lane sum of exp(z - m)
        w = tl.zeros((BLOCK,), tl.float32)  # per-lane sum of exp(z - m) z
        for start in range(0, vocab, BLOCK):
            cols = start + offs
            ok = cols < vocab
            z = tl.load(base + cols, mask=ok, other=float("-inf")).to(tl.float32) * inv_temp
            m_new = tl.maximum(m, z)
            # lanes still at -inf (nothing seen yet) keep zero sums
            alpha = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
            e = tl.where(ok, tl.exp(z - m_new), 0.0)
            s = s * alpha + e
            if ENTROPY:
                w = w * alpha + tl.where(ok, e * z, 0.0)
            m = m_new
        mx = tl.max(m, axis=0)
        scale = tl.where(m == float("-inf"), 0.0, tl.exp(m - mx))
        total = tl.sum(s * scale, axis=0)
        lse = mx + tl.log(total)
        target = tl.load(t_ptr + row)
        zt = tl.load(base + target).to(tl.float32) * inv_temp
        tl.store(lp_ptr + row, zt - lse)
        tl.store(lse_ptr + row, lse)
        if ENTROPY:
            tl.store(ent_ptr + row, lse - tl.sum(w * scale, axis=0) / total)
        else:
            tl.store(ent_ptr + row, 0.0)

    @triton.jit
    def grad_kernel(x_ptr, t_ptr, lse_ptr, ent_ptr, glp_ptr, gent_ptr, s_x, vocab, inv_temp,
                    HAS_ENT: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < vocab
        ptr = x_ptr + row * s_x + cols
        z = tl.load(ptr, mask=ok, other=0.0).to(tl.float32) * inv_temp
        lse = tl.load(lse_ptr + row)
        g_lp = tl.load(glp_ptr + row)
        logp = z - lse
        p = tl.exp(logp)
        target = tl.load(t_ptr + row)
        dz = g_lp * (tl.where(cols == target, 1.0, 0.0) - p)
        if HAS_ENT:
            ent = tl.load(ent_ptr + row)
            g_ent = tl.load(gent_ptr + row)
            dz = dz - g_ent * p * (logp + ent)
        tl.store(ptr, (dz * inv_temp).to(x_ptr.dtype.element_ty), mask=ok)

    return stats_kernel, grad_kernel


def _rows(logits: torch.Tensor) -> None:
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError("log-prob kernels: logits must be [rows, vocab] with contiguous rows")


def stats(logits: torch.Tensor, target: torch.Tensor, inv_temp: float,
          entropy: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logp[target], lse, entropy)`` fp32 [R] of ``logits`` [R, V] at temperature
    ``1 / inv_temp`` (entropy zeros when not ``entropy``)."""
    _rows(logits)
    r, vocab = logits.shape
    lp = torch.empty(r, device=logits.device, dtype=torch.float32)
    lse, ent = torch.empty_like(lp), torch.empty_like(lp)
    if r:
        _kernels()[0][(r,)](logits, target.contiguous(), lp, lse, ent, logits.stride(0), vocab,
                            float(inv_temp), ENTROPY=bool(entropy), BLOCK=STATS_BLOCK,
                            num_warps=8)
    return lp, lse, ent


def grad_(logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, ent: torch.Tensor,
          g_lp: torch.Tensor, g_ent: torch.Tensor | None, inv_temp: float) -> torch.Tensor:
    """Overwrite ``logits`` [R, V] with d loss / d logits (``g_lp``, ``g_ent`` fp32 [R];
    ``g_ent`` None: no entropy gradient) and return it."""
    _rows(logits)
    r, vocab = logits.shape
    if r:
        has_ent = g_ent is not None
        import triton

        grid = (r, triton.cdiv(vocab, GRAD_BLOCK))
        _kernels()[1][grid](logits, target.contiguous(), lse.contiguous(), ent.contiguous(),
                            g_lp.contiguous(), (g_ent if g_ent is not None else g_lp).contiguous(),
                            logits.stride(0), vocab, float(inv_temp), HAS_ENT=has_ent,
                            BLOCK=GRAD_BLOCK, num_warps=8)
    return logits
