"""The fused decoder's one-token attention on the CPU at SmolLM2's shapes, three ways, side by
side in one process:

* ``bmm``: the n_rep query heads of a KV head as rows of a batched product against its keys, a
  softmax, a second product (the fused decoder's form until 2026-12-07);
* ``sdpa_rows``: the same rows as the query positions of one ``scaled_dot_product_attention``
  call per (sequence, KV head), unmasked but for the padding bias (the form since:
  ``FusedDecoder._decode_attention``, called here);
* ``sdpa_gqa``: one query row per head, SDPA's ``enable_gqa``.

8 sequences, 3 KV heads of 3 query heads, 64 dims, a cache of 200 columns of which 60, 120 or
190 are read; 4 rows carry 10 padding columns. Median microseconds a call over ``--reps``
calls, the three alternating in ``--rounds`` rounds, and each way's largest difference from
``bmm``.

    python bench/cpu_decode_attention.py [--dtype float32|bfloat16] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

B, HKV, REP, D, CAP = 8, 3, 3, 64, 200
SCALE = D ** -0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from slime_std.engine.fused_decoder import FusedDecoder

    dt = getattr(torch, a.dtype)
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(B, HKV, CAP, D, generator=g).to(dt)
    values = torch.randn(B, HKV, CAP, D, generator=g).to(dt)
    q = torch.randn(B, HKV * REP, 1, D, generator=g).to(dt)
    real = torch.ones(B, CAP, dtype=torch.bool)
    real[:4, :10] = False
    bias = torch.zeros(B, CAP, dtype=dt).masked_fill_(~real, float("-inf")).view(B, 1, 1, CAP)
    decoder = FusedDecoder.__new__(FusedDecoder)  # _decode_attention reads no state

    def bmm(s: int) -> torch.Tensor:
        q3 = q.reshape(B * HKV, REP, D)
        k3 = keys[:, :, :s].reshape(B * HKV, s, D).transpose(1, 2)
        b3 = bias[..., :s].expand(B, HKV, 1, s).reshape(B * HKV, 1, s)
        scores = torch.baddbmm(b3, q3, k3, alpha=SCALE)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dt)
        return torch.bmm(probs, values[:, :, :s].reshape(B * HKV, s, D)).view(B, -1)

    def sdpa_rows(s: int) -> torch.Tensor:
        return decoder._decode_attention(q, keys[:, :, :s], values[:, :, :s], bias[..., :s],
                                         SCALE)

    def sdpa_gqa(s: int) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q, keys[:, :, :s], values[:, :, :s],
                                             attn_mask=bias[..., :s], scale=SCALE,
                                             enable_gqa=True)
        return out.reshape(B, -1)

    ways: dict[str, Callable[[int], torch.Tensor]] = {
        "bmm": bmm, "sdpa_rows": sdpa_rows, "sdpa_gqa": sdpa_gqa}
    for s in (60, 120, 190):
        want = bmm(s).float()
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(a.rounds):
            for name, fn in ways.items():
                for _ in range(10):
                    fn(s)
                start = time.perf_counter()
                for _ in range(a.reps):
                    fn(s)
                times[name].append((time.perf_counter() - start) / a.reps * 1e6)
        row = {"dtype": a.dtype, "columns": s, "threads": a.threads}
        for name, fn in ways.items():
            row[f"{name}_us"] = round(statistics.median(times[name]), 1)
            row[f"{name}_max_diff"] = float((fn(s).float() - want).abs().max())
        print(json.dumps(row))


if __name__ == "__main__":
    main()
