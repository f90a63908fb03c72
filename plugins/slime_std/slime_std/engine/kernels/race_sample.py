"""Full-vocabulary sampling of one token per row (the exponential race), as one Triton pass.

The engines' sampler (:mod:`slime_std.engine.sampler`) draws a token from
``softmax(logits / T)`` by the exponential race, ``argmax_j p_j / E_j`` with ``E_j ~ Exp(1)``
(equivalently ``argmax_j z_j - log E_j``, ``z = logits / T``; the Gumbel-max trick), and
returns the token's log-prob ``z_tok - logsumexp(z)``. In torch that is a noise tensor of the
logits' size (written by ``exponential_``, then read) and two to three more passes over the
fp32 values: on an H200 about 150 us of a 1.9 ms decode step for the anchor's 128 rows x 152k
vocabulary, against about 10 us to read the bf16 logits once (2026-12-02 profile).

Here each program reads a slice of one row's logits once and keeps, per lane, the running max
and sum of ``exp(z)`` and the best race ratio ``exp(z - max) / E`` (rescaled with the max, as
the sum) with its column; the noise comes from Philox
counters inside the kernel (seed: one draw from the caller's generator per call; counter: the
row and column), so no noise tensor exists. A second small kernel combines the slices of a
row. The draw is exact up to the uniforms' 24-bit resolution, which torch's ``exponential_``
has too: ``U = (2k + 1) / 2^24`` for 23 random bits ``k``, so ``-log U`` is never 0 (an
infinite score) or infinite.

Same distribution as the sampler's torch race (``slime_std.engine.sampler._race``, not the
same tokens for a seed: the random numbers differ); the log-prob of a given token is the same
function up to float rounding.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

BLOCK = 2048  # columns per tile (four sub-tiles, one Philox output each)
# rows x slices: programs enough to hide each one's dependent tile loads (the anchor's 128 rows
# x 4 slices ran at 12x the read bound on an H200 with two logs and two exps an element;
# 8 slices and the ratio form are not yet measured there)
MIN_PROGRAMS = 1024
MIN_SLICE_TILES = 4  # a slice holds at least this many tiles


@functools.cache
def _kernels() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def race_slice_kernel(
        x_ptr, seed_ptr, part_ptr, idx_ptr,
        s_xn, vocab, slice_cols, inv_t,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0)
        sl = tl.program_id(1)
        slices = tl.num_programs(1)
        Q: tl.constexpr = BLOCK // 4
        lanes = tl.arange(0, Q)
        seed = tl.load(seed_ptr) + row  # one Philox key per row
        # per lane, in log2 units: running max m of z and sum of 2^(z - m); the best race
        # ratio 2^(z - m) / E (E ~ Exp(1), up to a constant factor) rescaled with m, as the
        # sum is; its z (natural units) and column. One lg2 and two ex2 an element.
        m = tl.full((Q,), -3.0e38, tl.float32)
        s = tl.zeros((Q,), tl.float32)
        ratio = tl.zeros((Q,), tl.float32)
        best_z = tl.zeros((Q,), tl.float32)
        best_col = tl.zeros((Q,), tl.int32)
        lo = sl * slice_cols
        hi = tl.minimum(lo + slice_cols, vocab)
        base = x_ptr + row.to(tl.int64) * s_xn
        for start in range(lo, hi, BLOCK):
            r0, r1, r2, r3 = tl.randint4x(seed, start // 4 + lanes)
            for k in tl.static_range(4):
                r = tl.where(k == 0, r0, tl.where(k == 1, r1, tl.where(k == 2, r2, r3)))
                cols = start + k * Q + lanes
                ok = cols < hi
                z = tl.load(base + cols, mask=ok, other=float("-inf")).to(tl.float32) * inv_t
                z2 = z * 1.4426950408889634
                bits = (r.to(tl.uint32, bitcast=True) >> 9).to(tl.float32)
                u = (bits * 2.0 + 1.0) * 5.9604644775390625e-08  # (2k + 1) / 2^24, in (0, 1)
                m_new = tl.maximum(m, z2)
                alpha = tl.exp2(m - m_new)
                p = tl.exp2(z2 - m_new)  # 0 for masked columns
                s = s * alpha + p
                ratio = ratio * alpha
                cand = p / -tl.log2(u)  # -log2(u) = E / ln 2
                take = cand > ratio
                ratio = tl.where(take, cand, ratio)
                best_z = tl.where(take, z, best_z)
                best_col = tl.where(take, cols, best_col)
                m = m_new
        mx = tl.max(m, axis=0)
        total = tl.sum(s * tl.exp2(m - mx), axis=0)
        # race scores comparable across lanes (and slices): z - log2(E), log2 units
        best = tl.where(ratio > 0, tl.log2(ratio) + m, float("-inf"))
        top = tl.max(best, axis=0)
        # ties: the lowest column, as torch's argmax
        col = tl.min(tl.where(best == top, best_col, 2147483647), axis=0)
        zc = tl.max(tl.where((best == top) & (best_col == col), best_z, float("-inf")), axis=0)
        out = part_ptr + (row * slices + sl) * 4
        tl.store(out, mx)
        tl.store(out + 1, total)
        tl.store(out + 2, top)
        tl.store(out + 3, zc)
        tl.store(idx_ptr + row * slices + sl, col)

    @triton.jit
    def race_combine_kernel(part_ptr, idx_ptr, tok_ptr, lp_ptr, slices,
                            BLOCK_S: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK_S)
        ok = offs < slices
        p = part_ptr + (row * slices + offs) * 4
        m = tl.load(p, mask=ok, other=-3.0e38)
        s = tl.load(p + 1, mask=ok, other=0.0)
        score = tl.load(p + 2, mask=ok, other=float("-inf"))
        zc = tl.load(p + 3, mask=ok, other=float("-inf"))
        col = tl.load(idx_ptr + row * slices + offs, mask=ok, other=2147483647)
        mx = tl.max(m, axis=0)  # log2 units, as the sums
        lse = (mx + tl.log2(tl.sum(s * tl.exp2(m - mx), axis=0))) * 0.6931471805599453
        top = tl.max(score, axis=0)
        # slices are in column order: the lowest winning column is in the first winning slice
        win = tl.min(tl.where(score == top, col, 2147483647), axis=0)
        z = tl.max(tl.where((score == top) & (col == win), zc, float("-inf")), axis=0)
        tl.store(tok_ptr + row, win.to(tl.int64))
        tl.store(lp_ptr + row, z - lse)

    return race_slice_kernel, race_combine_kernel


def num_slices(rows: int, vocab: int) -> int:
    """Slices per row: about ``MIN_PROGRAMS`` programs in all, each slice at least
    ``MIN_SLICE_TILES`` tiles."""
    tiles = -(-vocab // BLOCK)
    want = -(-MIN_PROGRAMS // max(rows, 1))
    return max(1, min(want, tiles // MIN_SLICE_TILES or 1))


def race_sample(logits: torch.Tensor, temperature: float,
                generator: torch.Generator | None = None,
                slices: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row of ``logits`` [n, V] from ``softmax(logits / temperature)``:
    (tokens [n] long, log-probs [n] fp32 of ``log_softmax(logits / temperature)``). The Philox
    seed is one draw from ``generator`` (the device's default one when None), so a seeded
    generator gives the same tokens on the same device and shapes. ``slices``: per row
    (None: :func:`num_slices`)."""
    if logits.dim() != 2:
        raise ValueError(f"race_sample: logits must be [rows, vocab], got {tuple(logits.shape)}")
    if not temperature > 0:
        raise ValueError(f"race_sample: temperature must be > 0, got {temperature}")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    n, vocab = logits.shape
    device = logits.device
    seed = torch.randint(0, 2**31 - 2**20, (1,), device=device, dtype=torch.int64,
                         generator=generator)
    slices = slices or num_slices(n, vocab)
    tiles = -(-vocab // BLOCK)
    slice_cols = -(-tiles // slices) * BLOCK  # slices on tile boundaries
    slices = -(-vocab // slice_cols)
    part = torch.empty((n, slices, 4), device=device, dtype=torch.float32)
    idx = torch.empty((n, slices), device=device, dtype=torch.int32)
    tokens = torch.empty(n, device=device, dtype=torch.int64)
    lp = torch.empty(n, device=device, dtype=torch.float32)
    if n == 0:
        return tokens, lp
    slice_k, combine_k = _kernels()
    slice_k[(n, slices)](logits, seed, part, idx, logits.stride(0), vocab, slice_cols,
                         1.0 / float(temperature), BLOCK=BLOCK, num_warps=4)
    combine_k[(n,)](part, idx, tokens, lp, slices,
                    BLOCK_S=max(16, 1 << (slices - 1).bit_length()), num_warps=1)
    return tokens, lp
