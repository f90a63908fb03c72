"""The SmolLM2 decode's matrix products on the CPU (8 rows against each weight), by method,
next to the machine's memory bandwidth: what bounds a decode step that reads 540 MB of fp32
weights. Prints milliseconds and GB/s of weight read per product.

    python bench/small_m_products.py [--rows 8] [--threads 2]

Methods: ``x @ W^T`` (MKL, what ``F.linear`` does), ``(W @ x^T)^T`` (the orientation the
fused decoder uses on the CPU), one matrix-vector product (``torch.mv``, one row: the GEMV
kernel's rate), and the product written as multiply-and-sum compiled by inductor. The
bandwidth reference is a sum over a 540 MB tensor. Small weights are re-read from cache in a
loop like this one; in a decode step every weight comes from memory once.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def per_call(fn: Callable[[], object], n: int) -> float:
    for _ in range(3):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def mul_sum(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (w[:, None, :] * x[None, :, :]).sum(-1).t()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    big = torch.randn(135_000_000)
    out: dict[str, object] = {"threads": a.threads, "rows": a.rows,
                              "sum_540MB_GBps": big.numel() * 4 / 1e9 / per_call(big.sum, 5)}
    del big
    compiled = torch.compile(mul_sum, dynamic=False)
    # SmolLM2-135M: gate/up [3072, 576] (fused), down [576, 1536], LM head [49152, 576]
    for n, k in [(3072, 576), (576, 1536), (49152, 576)]:
        w, x = torch.randn(n, k), torch.randn(a.rows, k)
        gb = n * k * 4 / 1e9
        reps = 20 if n > 10000 else 200
        row: dict[str, float] = {}
        for name, fn in [("x_Wt", lambda: F.linear(x, w)), ("W_xt_t", lambda: (w @ x.t()).t()),
                         ("one_mv", lambda: torch.mv(w, x[0])),
                         ("mul_sum_compiled", lambda: compiled(w, x))]:
            s = per_call(fn, reps)
            row[f"{name}_ms"] = round(s * 1e3, 3)
            row[f"{name}_GBps"] = round(gb / s, 1)
        out[f"W{n}x{k}"] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
