"""One-token grouped-query attention against a static KV cache, as one Triton kernel.

The static decode path (:mod:`slime_std.engine.static_decode`) attends one new query per row
to a cache ``[B, H_kv, L, D]`` whose columns beyond the row's current length are masked. SDPA
(cuDNN picked it) took 23 us a layer for the anchor's 128 rows x 320 columns, against about 5
us to read that layer's keys and values once (``bench/README.md``). Here one program per
(row, KV head) holds that head's ``n_rep`` queries as the rows of one small product, walks the
cache in column tiles with an online softmax (fp32 scores and sums, probabilities rounded to
the value dtype before the second product, as flash attention does), and skips a tile whose
columns are all masked, so the keys and values a row has not written yet are never read.

When the rows and KV heads alone give too few programs to keep the device's memory busy (the
1.5b anchor's 512 programs, each walking the 11 written tiles of its row in turn, reached half
the read bound), the cache columns are also split across programs (flash-decoding): each
split writes its unnormalised fp32 output, running max and sum, and a second small kernel
combines the splits (:func:`num_splits` picks their number; ``splits=1`` is the one-kernel
path).

Same function as ``scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)`` with
``q`` viewed ``[B, H_kv, n_rep, D]`` (:func:`reference`), up to float rounding; a row with no
valid column gives zeros (SDPA gives NaN there; a decode row always has its own column).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from slime_core.api import pdl_supported

# Launch tuning, from bench/decode_attention.py --sweep on the H200 (2026-12-02, sixth
# session, results/gpu_decode_attention_sweep_h200_2026-12-02.jsonl): two warps a program and
# a key tile of about 4,096 elements (64 columns at D 64, 32 at D 128) were the fastest at both
# anchors' shapes, 13-25% under four warps and 64 columns
TILE_ELEMENTS = 4096
NUM_WARPS = 2
NUM_STAGES = 2
# Split heuristic (bench/decode_attention.py --splits sweeps the alternatives on a GPU):
PROGRAMS_PER_SM = 16  # one program's tile loads are dependent; others on its SM hide them
MIN_SPLIT_COLS = 128  # shorter splits pay more in q loads and partials than they hide
MAX_SPLITS = 16


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
              scale: float) -> torch.Tensor:
    """The torch form: ``q`` [B, H_kv, G, D], ``k``/``v`` [B, H_kv, L, D], ``mask`` [B, L]
    (True = attend) -> [B, H_kv, G, D]."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask[:, None, None, :], scale=scale)


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def decode_attention_kernel(
        q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, ml_ptr,
        kn_ptr, vn_ptr, cos_ptr, sin_ptr, col_ptr, s_knb, s_vnb, s_cb,
        s_qb, s_qh, s_qg,
        s_kb, s_kh, s_kl,
        s_vb, s_vh, s_vl,
        s_mb,
        s_ob, s_oh, s_os, s_og,
        s_mlb, s_mlh, s_mls,
        length, split_cols, groups, scale_log2e,
        D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
        ROPE: tl.constexpr, SKIP_TILES: tl.constexpr, PDL: tl.constexpr,
    ):
        if PDL:  # launched early (programmatic dependent launch): wait for the kernel before
            tl.extra.cuda.gdc_wait()
        b = tl.program_id(0)
        h = tl.program_id(1)
        sp = tl.program_id(2)
        offs_g = tl.arange(0, BLOCK_G)
        offs_d = tl.arange(0, D)
        offs_n = tl.arange(0, BLOCK_N)
        g_ok = offs_g < groups
        k_base = k_ptr + b * s_kb + h * s_kh
        v_base = v_ptr + b * s_vb + h * s_vh
        lo = sp * split_cols
        hi = tl.minimum(lo + split_cols, length)
        q_rows = q_ptr + b * s_qb + h * s_qh + offs_g[:, None] * s_qg
        if ROPE:
            # the step's rotary embedding, x * cos + roll(x, D/2) * sin (sin carrying
            # rotate_half's sign), in fp32 and rounded once, as the compiled step's fused
            # kernel did; the split holding this step's column writes the rotated key and the
            # value there before reading its columns
            rolled = (offs_d + D // 2) % D
            c = tl.load(cos_ptr + b * s_cb + offs_d).to(tl.float32)
            sn = tl.load(sin_ptr + b * s_cb + offs_d).to(tl.float32)
            q1 = tl.load(q_rows + offs_d[None, :], mask=g_ok[:, None], other=0.0)
            q2 = tl.load(q_rows + rolled[None, :], mask=g_ok[:, None], other=0.0)
            q = (q1.to(tl.float32) * c[None, :] + q2.to(tl.float32) * sn[None, :]).to(
                q1.dtype)
            col = tl.load(col_ptr)
            if (col >= lo) & (col < hi):
                kn = kn_ptr + b * s_knb + h * D
                k1 = tl.load(kn + offs_d).to(tl.float32)
                k2 = tl.load(kn + rolled).to(tl.float32)
                tl.store(k_base + col * s_kl + offs_d,
                         (k1 * c + k2 * sn).to(k_ptr.dtype.element_ty))
                tl.store(v_base + col * s_vl + offs_d, tl.load(vn_ptr + b * s_vnb + h * D + offs_d))
                tl.debug_barrier()  # the stores are seen by this program's loads below
            # no column past this step's is written (the static decode writes them in order):
            # the loop stops there instead of testing each later tile's mask
            hi = tl.minimum(hi, col + 1)
        else:
            q = tl.load(q_rows + offs_d[None, :], mask=g_ok[:, None], other=0.0)
        m_i = tl.full((BLOCK_G,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_G,), tl.float32)
        acc = tl.zeros((BLOCK_G, D), tl.float32)
        for start in range(lo, hi, BLOCK_N):
            cols = start + offs_n
            in_range = cols < hi
            valid = tl.load(m_ptr + b * s_mb + cols, mask=in_range, other=0) != 0
            # without ROPE the unwritten tail is only known from the mask: a tile with nothing
            # to attend is skipped (SKIP_TILES). With it the loop ends at the written tail and
            # needs no branch, which lets the compiler prefetch the next tile's keys and values
            # while this one is reduced (a masked-off column is not read either way)
            if (not SKIP_TILES) or tl.max(valid.to(tl.int32), axis=0) > 0:
                k = tl.load(k_base + cols[:, None] * s_kl + offs_d[None, :],
                            mask=valid[:, None], other=0.0)
                s = tl.dot(q, tl.trans(k)) * scale_log2e  # log2 domain
                s = tl.where(valid[None, :], s, float("-inf"))
                # a row's first tiles may be all left padding: its max stays -inf, and
                # exp2(-inf - -inf) would be NaN
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
                m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)
                alpha = tl.exp2(m_i - m_safe)
                p = tl.exp2(s - m_safe[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                v = tl.load(v_base + cols[:, None] * s_vl + offs_d[None, :],
                            mask=valid[:, None], other=0.0)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
        if PDL:  # the next kernel may launch; it waits for this one's stores before reading
            tl.extra.cuda.gdc_launch_dependents()
        o_offs = b * s_ob + h * s_oh + sp * s_os + offs_g[:, None] * s_og + offs_d[None, :]
        if SPLIT:  # unnormalised partial + its max and sum, combined by combine_kernel
            tl.store(o_ptr + o_offs, acc, mask=g_ok[:, None])
            ml = ml_ptr + b * s_mlb + h * s_mlh + sp * s_mls
            tl.store(ml + offs_g * 2, m_i, mask=g_ok)
            tl.store(ml + offs_g * 2 + 1, l_i, mask=g_ok)
        else:
            out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
            tl.store(o_ptr + o_offs, out.to(o_ptr.dtype.element_ty), mask=g_ok[:, None])

    return decode_attention_kernel


@functools.cache
def _combine_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def combine_kernel(
        part_ptr, ml_ptr, o_ptr,
        s_pb, s_ph, s_ps, s_pg,
        s_mlb, s_mlh, s_mls,
        s_ob, s_oh, s_og,
        splits, groups,
        D: tl.constexpr, BLOCK_G: tl.constexpr, PDL: tl.constexpr,
    ):
        if PDL:
            tl.extra.cuda.gdc_wait()
        # one split at a time with a running max (log2 domain, as the partials' maxima), so
        # registers hold one [G, D] partial whatever the number of splits
        b = tl.program_id(0)
        h = tl.program_id(1)
        offs_g = tl.arange(0, BLOCK_G)
        offs_d = tl.arange(0, D)
        g_ok = offs_g < groups
        m_run = tl.full((BLOCK_G,), float("-inf"), tl.float32)
        l_run = tl.zeros((BLOCK_G,), tl.float32)
        acc = tl.zeros((BLOCK_G, D), tl.float32)
        for sp in range(0, splits):
            ml = ml_ptr + b * s_mlb + h * s_mlh + sp * s_mls + offs_g * 2
            m = tl.load(ml, mask=g_ok, other=float("-inf"))
            l_s = tl.load(ml + 1, mask=g_ok, other=0.0)
            part = tl.load(part_ptr + b * s_pb + h * s_ph + sp * s_ps + offs_g[:, None] * s_pg
                           + offs_d[None, :], mask=g_ok[:, None], other=0.0)
            m_new = tl.maximum(m_run, m)
            # a split with no written column has max -inf and sum 0: weight 0, never NaN
            a_old = tl.where(m_run > float("-inf"), tl.exp2(m_run - m_new), 0.0)
            a_new = tl.where(m > float("-inf"), tl.exp2(m - m_new), 0.0)
            acc = acc * a_old[:, None] + part * a_new[:, None]
            l_run = l_run * a_old + l_s * a_new
            m_run = m_new
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        out = acc / tl.where(l_run > 0, l_run, 1.0)[:, None]
        tl.store(o_ptr + b * s_ob + h * s_oh + offs_g[:, None] * s_og + offs_d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=g_ok[:, None])

    return combine_kernel


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def tile_columns(head_dim: int) -> int:
    """Cache columns a program reduces per loop step at ``head_dim``: ``TILE_ELEMENTS`` keys'
    worth, 16 to 128 (the product's shape limits)."""
    return min(128, max(16, TILE_ELEMENTS // head_dim))


def num_splits(programs: int, length: int, device: torch.device) -> int:
    """How many column splits a call of ``programs`` (rows x KV heads) programs over a cache of
    ``length`` columns gets: about ``PROGRAMS_PER_SM`` programs a multiprocessor, each split
    at least ``MIN_SPLIT_COLS`` columns, at most ``MAX_SPLITS``. Static for a given shape, so a
    captured CUDA graph replays the same launch. (Splits past a row's written columns cost
    only their mask reads: the written length grows during decoding, the split stays.)"""
    sms = _sm_count(device.index or 0) if device.type == "cuda" else 16
    want = -(-PROGRAMS_PER_SM * sms // max(programs, 1))
    return max(1, min(want, -(-length // MIN_SPLIT_COLS), MAX_SPLITS))


def head_dim_unsupported(d: int) -> str | None:
    """Why the kernel cannot take a head dimension of ``d`` (None: it can): its tiles span
    the head dimension in one power-of-two block of at least 16."""
    if d & (d - 1) or d < 16:
        return f"head dim {d} is not a power of two >= 16"
    return None


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
            scale: float, splits: int | None = None,
            rope: tuple[torch.Tensor, ...] | None = None, *, block_n: int | None = None,
            num_warps: int = NUM_WARPS, num_stages: int = NUM_STAGES,
            skip_tiles: bool | None = None, pdl: bool = False) -> torch.Tensor:
    """``rope``: (new keys [B, H_kv, D], new values [B, H_kv, D], cos [B, D], sin [B, D],
    column [1]) to rotate ``q`` and write the step's key and value (see
    :func:`decode_attention_rope`). The keywords are the launch's tuning
    (``bench/decode_attention.py --sweep`` times them); ``skip_tiles`` (None: without
    ``rope`` only) tests each tile's mask and skips a tile with nothing to attend;
    ``block_n`` None is :func:`tile_columns`; ``pdl``: launch with programmatic dependent
    launch where :func:`slime_core.api.pdl_supported` (else ignored)."""
    b, hkv, groups, d = q.shape
    length = k.shape[2]
    if (why := head_dim_unsupported(d)) is not None:
        raise ValueError(f"decode attention kernel: {why}")
    if k.stride(-1) != 1 or v.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("decode attention kernel: the head dimension must be contiguous")
    if rope is not None:
        k_new, v_new, cos, sin, column = rope
        for name, t in (("keys", k_new), ("values", v_new)):
            if t.shape != (b, hkv, d) or t.stride(1) != d or t.stride(2) != 1:
                raise ValueError(f"decode attention kernel: new {name} must be [B, H_kv, D] "
                                 f"with contiguous heads, got {tuple(t.shape)} {t.stride()}")
        if cos.shape != (b, d) or sin.shape != (b, d) or cos.stride() != sin.stride() \
                or cos.stride(1) != 1:
            raise ValueError("decode attention kernel: cos and sin must be [B, D], rows alike")
        extra = (k_new, v_new, cos, sin, column, k_new.stride(0), v_new.stride(0), cos.stride(0))
    else:
        extra = (q, q, q, q, q, 0, 0, 0)  # unread
    m = mask.reshape(b, -1)
    if m.shape[1] != length:
        raise ValueError(f"decode attention kernel: mask has {m.shape[1]} columns, cache {length}")
    # a bool mask is read as bytes in place (no conversion kernel per layer and step)
    m = m.view(torch.uint8) if m.dtype == torch.bool else (m != 0).to(torch.uint8)
    out = torch.empty((b, hkv, groups, d), device=q.device, dtype=q.dtype)
    block_g = max(16, 1 << (groups - 1).bit_length())
    block_n = block_n or tile_columns(d)
    pdl = pdl and pdl_supported(q.device)
    if splits is None:
        splits = num_splits(b * hkv, length, q.device)
    # split boundaries on tile boundaries, so no tile straddles two splits
    per_split = -(-length // splits)
    split_cols = -(-per_split // block_n) * block_n
    splits = -(-length // split_cols)
    if splits == 1:
        part, ml = out.unsqueeze(2), out  # the output written directly; ml unread
    else:
        part = torch.empty((b, hkv, splits, groups, d), device=q.device, dtype=torch.float32)
        ml = torch.empty((b, hkv, splits, groups, 2), device=q.device, dtype=torch.float32)
    _kernel()[(b, hkv, splits)](
        q, k, v, m, part, ml, *extra,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        m.stride(0),
        part.stride(0), part.stride(1), part.stride(2), part.stride(3),
        ml.stride(0), ml.stride(1), ml.stride(2),
        length, split_cols, groups, scale * 1.4426950408889634,
        D=d, BLOCK_G=block_g, BLOCK_N=block_n, SPLIT=splits > 1, ROPE=rope is not None,
        SKIP_TILES=rope is None if skip_tiles is None else skip_tiles, PDL=pdl,
        num_warps=num_warps, num_stages=num_stages, **({"launch_pdl": True} if pdl else {}),
    )
    if splits > 1:
        _combine_kernel()[(b, hkv)](
            part, ml, out,
            part.stride(0), part.stride(1), part.stride(2), part.stride(3),
            ml.stride(0), ml.stride(1), ml.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            splits, groups,
            D=d, BLOCK_G=block_g, PDL=pdl, num_warps=4, **({"launch_pdl": True} if pdl else {}),
        )
    return out


@torch.library.custom_op("slime::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     scale: float, splits: int | None = None, pdl: bool = False) -> torch.Tensor:
    """``q`` [B, H_kv, G, D] (the ``G = n_rep`` query heads of each KV head), ``k``/``v``
    [B, H_kv, L, D], ``mask`` [B, L] or [B, 1, 1, L] (nonzero = attend) -> [B, H_kv, G, D].

    A custom op, so ``torch.compile`` keeps it as one opaque call (the compiled decode step
    that a CUDA graph captures). ``splits``: column splits (None: :func:`num_splits`);
    ``pdl``: programmatic dependent launch where supported (same result, launched early;
    not yet timed on a GPU, so the engine does not pass it: ``bench/h200_issue24.sh
    pdl_kernels``)."""
    return _launch(q, k, v, mask, scale, splits, pdl=pdl)


@decode_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
      scale: float, splits: int | None = None, pdl: bool = False) -> torch.Tensor:
    return q.new_empty(q.shape)


@torch.library.custom_op("slime::decode_attention_rope", mutates_args=("k", "v"))
def decode_attention_rope(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                          cos: torch.Tensor, sin: torch.Tensor, column: torch.Tensor,
                          k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
                          splits: int | None = None, pdl: bool = False) -> torch.Tensor:
    """One decode step's attention with its rotary embedding and cache write in the same
    kernel: ``q`` [B, H_kv, G, D] and ``k_new`` / ``v_new`` [B, H_kv, D] as the q/k/v product
    gave them (views of it: heads contiguous), ``cos`` / ``sin`` [B, D] (``sin`` carrying
    ``rotate_half``'s sign), ``column`` [1] (long) the cache column of this step, which
    ``mask`` already marks. Writes the rotated key and the value into ``k`` / ``v`` at
    ``column`` and returns :func:`decode_attention` of the rotated queries. The compiled step
    then has no separate rotary and cache-write kernels (four a layer on the anchor)."""
    return _launch(q, k, v, mask, scale, splits, (k_new, v_new, cos, sin, column), pdl=pdl)


@decode_attention_rope.register_fake
def _(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, cos: torch.Tensor,
      sin: torch.Tensor, column: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
      mask: torch.Tensor, scale: float, splits: int | None = None,
      pdl: bool = False) -> torch.Tensor:
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` [..., D] rotated as the kernel does (fp32, one rounding); ``cos`` / ``sin``
    broadcast against it."""
    d = x.shape[-1]
    out = x.float() * cos.float() + x.float().roll(d // 2, -1) * sin.float()
    return out.to(x.dtype)
