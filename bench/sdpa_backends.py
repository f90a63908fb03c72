"""The training attention's forward + backward by SDPA backend, at the anchors' shapes.

The tenth session's H100 profile of the 0.5B anchor's training showed PyTorch's memory-efficient
kernel (``fmha_cutlassB``, 536 us a call, ~55 ms a step with the forward) where the fused-head
path passes no mask so that SDPA could take flash. transformers calls SDPA with
``enable_gqa=True`` and ``is_causal=True`` there (no mask, GQA heads). This times one causal
call forward + backward per backend, with the grouped key/value heads as given
(``enable_gqa``) and repeated to every query head, names the kernels the default choice
launches (and the operators it runs inside a CUDA graph capture, as the training graphs
capture it), and the largest difference from the math backend's output.

    python bench/sdpa_backends.py [--reps 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = {  # rows, query heads, key/value heads, tokens, head dim (the anchors' micro-batches)
    "0.5b": (43, 14, 2, 269, 64),
    "1.5b": (15, 12, 2, 1040, 128),
    "smollm2": (128, 9, 3, 96, 64),
}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def _call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> torch.Tensor:
    if not gqa:
        n = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(n, 1), v.repeat_interleave(n, 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


def _time(fn, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.backends.cuda.enable_cudnn_sdp(False)  # run.cudnn_attention's default, for "default"
    for name, (b, h, hkv, n, d) in SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, heads, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   .requires_grad_() for heads in (h, hkv, hkv))
        grad = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
        with sdpa_kernel([SDPBackend.MATH]):
            want = _call(q.float(), k.float(), v.float(), True).detach()
        row: dict[str, object] = {"what": "sdpa", "shape": name, "b_h_hkv_n_d": [b, h, hkv, n, d]}
        for backend in ("default", *BACKENDS):
            for gqa in (True, False):
                key = f"{backend}{'' if gqa else '_repeat'}"

                def run() -> torch.Tensor:
                    out = _call(q, k, v, gqa)
                    out.backward(grad)
                    return out

                try:
                    if backend == "cudnn":
                        torch.backends.cuda.enable_cudnn_sdp(True)
                    with (sdpa_kernel([BACKENDS[backend]]) if backend != "default"
                          else contextlib.nullcontext()):
                        row[f"{key}_ms"] = round(_time(run, a.reps), 3)
                        err = (run().detach().float() - want).abs().max()
                    row[f"{key}_err"] = float(err)
                except RuntimeError as e:
                    row[f"{key}_ms"] = f"unavailable: {str(e).splitlines()[0][:80]}"
                finally:
                    torch.backends.cuda.enable_cudnn_sdp(False)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
            _call(q, k, v, True).backward(grad)
            torch.cuda.synchronize()
        row["default_kernels"] = sorted({e.name[:60] for e in prof.events()
                                         if any(s in e.name.lower()
                                                for s in ("fmha", "flash", "attention", "cudnn",
                                                          "sdpa"))})
        try:
            row["captured_kernels"] = _captured_ops(q, k, v, grad)
        except RuntimeError as e:
            row["captured_kernels"] = [f"capture failed: {str(e).splitlines()[0][:120]}"]
        print(json.dumps(row), flush=True)


def _captured_ops(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  grad: torch.Tensor) -> list[str]:
    """The attention operators the default choice runs inside a CUDA graph capture (as the
    training graphs capture it): does capturing change the backend?"""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _call(q, k, v, True).backward(grad)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.cuda.graph(graph):
            _call(q, k, v, True).backward(grad)
    graph.replay()
    torch.cuda.synchronize()
    return sorted({e.name[:60] for e in prof.events()
                   if "attention" in e.name.lower() or "fmha" in e.name.lower()})


if __name__ == "__main__":
    main()
