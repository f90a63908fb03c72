"""Response log-probs of one micro-batch's head step, forward + backward: the model-forward path
(logits at every position, gather, fp32 log-softmax, entropy) against ``logprob_head`` eager,
compiled and with its Triton kernels (``train.head_kernel = "triton"``). The anchor's shapes by default (Qwen2-0.5B head, 152k vocabulary, bf16, 64 rows
x 256 positions, 248 response tokens a row); prints milliseconds and the head's FLOP rate.

    python bench/head_logprob.py [--device cuda] [--rows 64] [--width 256] [--resp 248]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from slime_core.trainkit import logprob_head
from slime_core.trainkit.logprob_head import head_log_probs


def model_forward_path(h_all, head, rows, cols, target):
    logits = head(h_all)  # [B, W, V] like lm_head over every position
    lg = logits[rows, cols].float()
    logp = torch.log_softmax(lg, dim=-1)
    lp = logp.gather(-1, target[:, None]).squeeze(-1)
    with torch.no_grad():
        ent = -(logp.exp() * logp).sum(-1)
    return lp, ent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--resp", type=int, default=248)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunk-bytes", type=int, default=0,
                    help="override logprob_head.CHUNK_BYTES and CPU_CHUNK_BYTES (rows per "
                         "chunk = this / (4 V))")
    a = ap.parse_args()
    if a.chunk_bytes:
        logprob_head.CHUNK_BYTES = logprob_head.CPU_CHUNK_BYTES = a.chunk_bytes
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(0)
    head = torch.nn.Linear(a.hidden, a.vocab, bias=False, device=dev, dtype=dtype)
    h_all = torch.randn(a.rows, a.width, a.hidden, device=dev, dtype=dtype, requires_grad=True)
    rows = torch.arange(a.rows, device=dev).repeat_interleave(a.resp)
    cols = torch.arange(a.width - a.resp - 1, a.width - 1, device=dev).repeat(a.rows)
    target = torch.randint(0, a.vocab, (rows.numel(),), device=dev)
    coef = torch.randn(rows.numel(), device=dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def run(name: str) -> float:
        times = []
        for _ in range(a.reps + 2):
            h_all.grad, head.weight.grad = None, None
            sync()
            t = time.perf_counter()
            if name == "model_forward":
                lp, _ = model_forward_path(h_all, head, rows, cols, target)
            else:
                lp, _ = head_log_probs(h_all[rows, cols], head, target, 1.0, entropy=True,
                                       entropy_grad=False, compile=name == "fused_compiled",
                                       kernel="triton" if name == "fused_triton" else "torch")
            (lp * coef).sum().backward()
            sync()
            times.append(time.perf_counter() - t)
        return sorted(times[2:])[len(times[2:]) // 2]

    r = rows.numel()
    head_flops = 6 * r * a.hidden * a.vocab  # at response positions only
    out = {"device": str(dev), "rows": a.rows, "width": a.width, "response_tokens": r,
           "chunk_bytes": logprob_head.CPU_CHUNK_BYTES if dev.type == "cpu"
           else logprob_head.CHUNK_BYTES}
    names = ["model_forward", "fused_eager", "fused_compiled"]
    if dev.type == "cuda":
        names.append("fused_triton")  # train.head_kernel = "triton"
    for name in names:
        s = run(name)
        out[f"{name}_ms"] = s * 1e3
        out[f"{name}_head_tflops"] = head_flops / s / 1e12
    print(json.dumps(out))


if __name__ == "__main__":
    main()
