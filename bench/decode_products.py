"""One decode step's matrix products on CUDA at an anchor shape: each product of the fused
decoder (q/k/v together, output, gate and up together, down, the vocabulary head) with the
step's rows against every layer's own weight, as a decode step reads them (a loop over one
weight would serve it from L2 after the first call), replayed from a CUDA graph. Prints
microseconds per product and per step next to the weight-read bound at the copy bandwidth
``gpu_anchor.py`` measures: the share of a decode step the products take and how far they are
from memory speed.

    python bench/decode_products.py [--shape 1.5b] [--rows 256]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from decode_attention import graph_us
from gpu_anchor import SHAPES, ceilings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1.5b", choices=sorted(SHAPES))
    ap.add_argument("--rows", type=int, default=0, help="decode rows (0: the anchor's)")
    a = ap.parse_args()
    c, prompts, group, _ = SHAPES[a.shape]
    rows = a.rows or prompts * group
    h, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = h // heads
    products = {  # name -> (in features, out features, count a step)
        "qkv": (h, (heads + 2 * kv) * d, layers),
        "o": (heads * d, h, layers),
        "gate_up": (h, 2 * inter, layers),
        "down": (inter, h, layers),
        "lm_head": (h, c["vocab_size"], 1),
    }
    # the anchor's own copy bandwidth, timed in a plain loop: a copy captured in a CUDA graph
    # became a copy-engine transfer there (2.7 TB/s against 4.2)
    bw = ceilings()["copy_bytes_per_s"]
    out: dict[str, object] = {"what": "decode_products", "shape": a.shape, "rows": rows,
                              "copy_gb_per_s": round(bw / 1e9)}
    total_us = total_bound_us = 0.0
    for name, (fin, fout, count) in products.items():
        ws = [torch.randn(fout, fin, device="cuda", dtype=torch.bfloat16) * 0.02
              for _ in range(count)]
        x = torch.randn(rows, fin, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(rows, fout, device="cuda", dtype=torch.bfloat16)

        def step(ws=ws, x=x, y=y) -> None:
            for w in ws:
                torch.matmul(x, w.t(), out=y)

        for _ in range(2):
            step()
        us = graph_us(step, 1, 20) / count
        bound = (fin * fout + rows * (fin + fout)) * 2 / bw * 1e6
        out[f"{name}_us"] = round(us, 2)
        out[f"{name}_bound_us"] = round(bound, 2)
        out[f"{name}_x_bound"] = round(us / bound, 2)
        total_us += us * count
        total_bound_us += bound * count
        ref = F.linear(x.float(), ws[-1].float())
        out[f"{name}_max_err"] = float((y.float() - ref).abs().max())
        del ws
        torch.cuda.empty_cache()
    out["step_products_ms"] = round(total_us / 1e3, 3)
    out["step_products_bound_ms"] = round(total_bound_us / 1e3, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
