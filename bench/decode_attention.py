"""One decode step's attention at the anchor's shapes, by implementation: what the static decode
path calls now (SDPA over grouped queries, whichever backend torch picks), SDPA limited to each
backend, the explicit three-operation form (scores, masked fp32 softmax, weighted sum),
eager and compiled, and slime's Triton kernel (``slime_std.engine.kernels.decode_attention``) with
its own choice of column splits and with each count of ``--splits``. Prints microseconds per
call (on CUDA: GPU time of calls replayed from a CUDA graph, as the decode loop runs them) and
the largest difference from an fp32 reference. ``--sweep`` also times the fused-rotary form the
compiled decode step calls (``decode_attention_rope``, this step's column the last switched on)
under each launch tuning: tile width, warps, pipeline stages, with and without the per-tile
mask test, at its own split count, and at each of ``--splits`` (which then replace the
non-rotary kernel's split timings). The fused-rotary op is also timed as the step calls it,
with and without programmatic dependent launch (``rope``, ``rope_pdl``).

    python bench/decode_attention.py [--batch 128] [--length 320] [--filled 270] [--sweep]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F


def explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
             scale: float) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


def explicit_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                  scale: float) -> torch.Tensor:
    """The same with fp32 scores (SDPA's rounding): compiled, 56 us against SDPA's 23 on the
    H200, so the compiled decode step keeps SDPA."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.matmul(probs, v.float()).to(q.dtype)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
         scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def graph_us(fn: Callable[[], object], per_graph: int, replays: int) -> float:
    """GPU microseconds of one ``fn()`` call: ``per_graph`` calls captured in one CUDA graph
    (after a warm-up on a side stream), the graph replayed ``replays`` times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (per_graph * replays)


def _rope_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 column: int) -> tuple[torch.Tensor, ...]:
    """The fused-rotary op's extra inputs at ``column``: the new key and value copied from the
    cache's own column there, cos 1, sin 0 (the reference still holds)."""
    b, _, _, d = q.shape
    cos = torch.ones(b, d, device=q.device, dtype=q.dtype)
    return (k[:, :, column].clone(), v[:, :, column].clone(), cos, cos * 0,
            torch.tensor([column], device=q.device))


def _rope_sweep(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                scale: float, column: int, split_counts: list[int],
                ) -> dict[str, Callable[[], torch.Tensor]]:
    """The fused-rotary kernel at ``column`` (:func:`_rope_inputs`) under each launch tuning
    at its own split count, and at each of ``split_counts`` with two pipeline stages."""
    from slime_std.engine.kernels.decode_attention import _launch, num_splits

    b, hkv = q.shape[:2]
    rope = _rope_inputs(q, k, v, column)
    own = num_splits(b * hkv, k.shape[2], q.device)
    cands: dict[str, Callable[[], torch.Tensor]] = {}
    tunings = [(True, 64, 4, 2)] + [(False, bn, w, st) for bn in (16, 32, 64)
                                    for w in (1, 2, 4) for st in (2, 3)]
    for splits in sorted({own, *split_counts}):
        for skip, bn, w, st in tunings:
            if splits != own and (skip or st != 2):
                continue  # the other split counts at two stages, without the mask test
            name = f"rope_s{splits}_bn{bn}_w{w}_st{st}" + ("_skip" if skip else "")
            cands[name] = (lambda splits=splits, skip=skip, bn=bn, w=w, st=st: _launch(
                q, k, v, mask, scale, splits, rope, block_n=bn, num_warps=w, num_stages=st,
                skip_tiles=skip))
    return cands


def _rope_pdl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
              scale: float, column: int) -> dict[str, Callable[[], torch.Tensor]]:
    """The fused-rotary op as the decode step calls it, with and without programmatic
    dependent launch (the graph of 50 calls then overlaps each launch with the call before:
    a proxy for the step, where the kernel before is a product)."""
    from slime_std.engine.kernels.decode_attention import decode_attention_rope

    rope = _rope_inputs(q, k, v, column)
    return {f"rope{'_pdl' if pdl else ''}": (lambda pdl=pdl: decode_attention_rope(
        q, *rope, k, v, mask, scale, None, pdl)) for pdl in (False, True)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--groups", type=int, default=7)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--length", type=int, default=320, help="static cache length")
    ap.add_argument("--filled", type=int, default=270, help="columns switched on")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--splits", default="1,2,3,4,6,8",
                    help="column splits of slime's kernel to time beside its own choice")
    ap.add_argument("--sweep", action="store_true",
                    help="time the fused-rotary kernel under each launch tuning")
    a = ap.parse_args()
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    g = torch.Generator(device=dev).manual_seed(0)
    shape_q = (a.batch, a.kv_heads, a.groups, a.head_dim)
    shape_kv = (a.batch, a.kv_heads, a.length, a.head_dim)
    q = torch.randn(shape_q, device=dev, generator=g).to(dtype)
    k = (torch.randn(shape_kv, device=dev, generator=g) * 2).to(dtype)
    v = torch.randn(shape_kv, device=dev, generator=g).to(dtype)
    mask = torch.zeros(a.batch, 1, 1, a.length, dtype=torch.bool, device=dev)
    mask[..., 5:a.filled] = True  # some left padding, the unwritten tail off
    scale = a.head_dim ** -0.5
    ref = explicit(q.float(), k.float(), v.float(), mask, scale)

    cands: dict[str, Callable[[], torch.Tensor]] = {
        "sdpa_default": lambda: sdpa(q, k, v, mask, scale),
        "explicit": lambda: explicit(q, k, v, mask, scale),
    }
    if dev.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for name, backend in [("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
                              ("sdpa_math", SDPBackend.MATH)]:
            def run(backend=backend) -> torch.Tensor:
                with sdpa_kernel([backend]):
                    return sdpa(q, k, v, mask, scale)
            cands[name] = run
        compiled = torch.compile(explicit, dynamic=False)
        cands["explicit_compiled"] = lambda: compiled(q, k, v, mask, scale)
        compiled32 = torch.compile(explicit_fp32, dynamic=False)
        cands["explicit_fp32_compiled"] = lambda: compiled32(q, k, v, mask, scale)
    from slime_core import kernels

    if kernels.available(dev):  # slime's Triton kernel (rollout.decode_attention = "triton")
        from slime_std.engine.kernels.decode_attention import decode_attention, num_splits

        cands["slime_triton"] = lambda: decode_attention(q, k, v, mask, scale)
        print(json.dumps({"slime_triton_splits": num_splits(a.batch * a.kv_heads, a.length,
                                                            dev)}))
        counts = [int(x) for x in a.splits.split(",") if x]
        for n in [] if a.sweep else counts:
            cands[f"slime_triton_split{n}"] = (
                lambda n=n: decode_attention(q, k, v, mask, scale, n))
        if a.sweep:
            cands.update(_rope_sweep(q, k, v, mask, scale, a.filled - 1, counts))
        cands.update(_rope_pdl(q, k, v, mask, scale, a.filled - 1))
    out: dict[str, object] = {"device": str(dev), "q": list(shape_q), "kv": list(shape_kv)}
    for name, fn in cands.items():
        try:
            for _ in range(3):
                got = fn()
            if dev.type == "cuda":  # GPU time: calls replayed from a CUDA graph, as in decoding
                us = graph_us(fn, 50, a.iters // 50)
            else:
                import time

                t = time.perf_counter()
                for _ in range(a.iters):
                    fn()
                us = (time.perf_counter() - t) * 1e6 / a.iters
            out[f"{name}_us"] = round(us, 2)
            out[f"{name}_max_err"] = float((got.float() - ref).abs().max())
        except Exception as e:  # a backend that refuses these inputs says so and the rest run
            out[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:120]}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
