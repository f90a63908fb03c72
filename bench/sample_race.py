"""One decode step's full-vocabulary sampling, by implementation, in one process: the eager
torch race (``exponential_`` noise, log-softmax, argmax, gather), the same compiled
(``rollout.compile_decode``'s sampler before 2026-12-02) and the Triton kernel
(``rollout.sample_kernel``, :mod:`slime_std.engine.kernels.race_sample`). The anchor's shape by
default (128 rows x 151,936, bf16 logits); prints microseconds per call (CUDA events, median
of ``--reps``), the bound of one read of the logits at the measured copy bandwidth, and the
kernel's log-prob error against ``log_softmax`` at the drawn tokens.

    python bench/sample_race.py [--rows 128] [--vocab 151936]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from slime_std.engine.kernels.race_sample import num_slices, race_sample
from slime_std.engine.sampler import GroupSampler, SamplingKey


def timed(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    logits = (torch.randn(a.rows, a.vocab, device=dev, generator=gen) * 3).to(torch.bfloat16)
    key = SamplingKey(1.0, 0, 1.0, None)
    eager = GroupSampler(key, gen, race=True)
    compiled = GroupSampler(key, gen, race=True, compiled=True)
    kernel = GroupSampler(key, gen, kernel=True)
    buf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    copy_s = timed(lambda: buf.clone(), 20) * 1e-6
    bandwidth = 2 * buf.numel() / copy_s
    row = {"what": "sample_race", "rows": a.rows, "vocab": a.vocab,
           "slices": num_slices(a.rows, a.vocab),
           "read_bound_us": logits.numel() * logits.element_size() / bandwidth * 1e6}
    for name, fn in (("eager_us", eager), ("compiled_us", compiled), ("kernel_us", kernel)):
        row[name] = timed(lambda fn=fn: fn(logits), a.reps)
    tokens, lp = race_sample(logits, 1.0, gen)
    ref = torch.log_softmax(logits.float(), -1).gather(1, tokens[:, None]).squeeze(1)
    row["kernel_max_abs_logprob_err"] = float((lp - ref).abs().max())
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
