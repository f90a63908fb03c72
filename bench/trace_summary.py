"""Where a profiled anchor step's GPU time goes, from the torch profiler's Chrome trace.

``gpu_anchor.py --profile-dir D --profile-steps A,B`` writes ``D/trace_<variant>.json.gz``:
the training of rollout A, the weight sync, rollout B's generation and B's training. A trace
of one 0.5b anchor step holds ~100k kernels (far over what a device call returns), so this
script reduces it on the device to one page:

* the phases on the GPU timeline: each ``slime/train_N`` range (its ``gpu_user_annotation``,
  else the kernels launched inside its CPU range) and the generation between two of them;
* per phase: span, busy time (union of kernel intervals), idle time, kernel count, and the
  gaps between consecutive kernels by size (a CUDA-graph replay has ~1-2 us between
  kernels; tens of microseconds mean the host did not keep the queue full);
* per phase the kernels by total time (per decode step in the rollout: count and time
  divided by ``--decode-steps``), and by class (products, attention, elementwise, ...).

    python bench/trace_summary.py trace_fast_mb16k_defaults.json.gz --decode-steps 256
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

# kernel name -> class, first match wins (names as CUPTI reports them on Hopper)
CLASSES = [
    ("product", re.compile(r"nvjet|gemm|cutlass|sm90_xmma|splitKreduce|wgmma|_mm_|addmm", re.I)),
    ("attention", re.compile(r"attention|attn|flash|fmha|sdpa|_decode_att|combine", re.I)),
    ("log-prob head", re.compile(r"logprob|_stats_|head", re.I)),
    ("softmax/sampling", re.compile(r"softmax|exponential|argmax|distribution|_race|logsumexp", re.I)),
    ("norm", re.compile(r"rms|norm|mean", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("copy/memset", re.compile(r"memcpy|memset|copy|cat", re.I)),
    ("reduction", re.compile(r"reduce|sum", re.I)),
    ("elementwise", re.compile(r"elementwise|triton_poi|triton_per|triton_red|vectorized|unrolled", re.I)),
]
GAP_EDGES = [(0, 2, "<2us"), (2, 5, "2-5us"), (5, 20, "5-20us"), (20, 100, "20-100us"),
             (100, float("inf"), ">100us")]


def klass(name: str) -> str:
    for label, pattern in CLASSES:
        if pattern.search(name):
            return label
    return "other"


def load(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def phases(events: list[dict[str, Any]], kernels: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(name, start, end) on the GPU timeline: each training range and the gaps between them."""
    gpu = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                 if e.get("cat") == "gpu_user_annotation" and e.get("name", "").startswith("slime/train_"))
    if not gpu:  # map the CPU ranges through the kernels they launched (correlation ids)
        launch = {e["args"]["correlation"]: e["ts"] for e in events
                  if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
        for e in events:
            if e.get("cat") != "user_annotation" or not e.get("name", "").startswith("slime/train_"):
                continue
            lo, hi = e["ts"], e["ts"] + e["dur"]
            inside = [k for k in kernels if lo <= launch.get(k["args"].get("correlation"), -1) <= hi]
            if inside:
                gpu.append((min(k["ts"] for k in inside), max(k["ts"] + k["dur"] for k in inside), e["name"]))
        gpu.sort()
    out: list[tuple[str, float, float]] = []
    for i, (lo, hi, name) in enumerate(gpu):
        if i:
            out.append((f"between {gpu[i - 1][2].split('/')[1]} and {name.split('/')[1]} "
                        "(weight sync + rollout)", gpu[i - 1][1], lo))
        out.append((name, lo, hi))
    return out


def summarize(kernels: list[dict[str, Any]], lo: float, hi: float, per: int, top: int) -> list[str]:
    ks = sorted((k for k in kernels if lo <= k["ts"] < hi), key=lambda k: k["ts"])
    lines = [f"  span {(hi - lo) / 1e3:.1f} ms, {len(ks)} kernels"]
    if not ks:
        return lines
    busy, end = 0.0, ks[0]["ts"]
    gaps: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for k in ks:
        s, e = k["ts"], k["ts"] + k["dur"]
        if s > end:
            gap = s - end
            for a, b, label in GAP_EDGES:
                if a <= gap < b:
                    gaps[label][0] += 1
                    gaps[label][1] += gap
            busy += e - s
        else:
            busy += max(0.0, e - end)
        end = max(end, e)
    lines.append(f"  GPU busy {busy / 1e3:.1f} ms ({busy / (hi - lo):.0%} of the span), idle "
                 f"{(hi - lo - busy) / 1e3:.1f} ms")
    lines.append("  gaps between kernels: " + ", ".join(
        f"{label} {gaps[label][0]} ({gaps[label][1] / 1e3:.1f} ms)" for _, _, label in GAP_EDGES))
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_class: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for k in ks:
        by_name[k["name"]][0] += 1
        by_name[k["name"]][1] += k["dur"]
        by_class[klass(k["name"])][0] += 1
        by_class[klass(k["name"])][1] += k["dur"]
    unit = f"/{per} steps" if per > 1 else ""
    lines.append(f"  by class (kernels{unit}, us{unit}, share of kernel time):")
    total = sum(v[1] for v in by_class.values())
    for label, (n, t) in sorted(by_class.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"    {label:18s} {n / per:9.1f} {t / per:10.1f}  {t / total:6.1%}")
    lines.append(f"  top kernels (count{unit}, us{unit}, mean us):")
    for name, (n, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"    {n / per:8.1f} {t / per:10.1f} {t / n:8.2f}  {name[:110]}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--decode-steps", type=int, default=256,
                    help="decode steps in the rollout phase (per-step figures divide by it)")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    events = load(a.trace)
    kernels = [e for e in events if e.get("cat") == "kernel" or
               (e.get("cat") in ("gpu_memcpy", "gpu_memset") and "dur" in e)]
    print(f"# {Path(a.trace).name}: {len(events)} events, {len(kernels)} GPU activities")
    for name, lo, hi in phases(events, kernels):
        print(f"\n## {name}")
        per = a.decode_steps if name.startswith("between") else 1
        print("\n".join(summarize(kernels, lo, hi, per, a.top)))
    # the host side of the rollout: graph launches and the Python between them
    launches = sorted(e["ts"] for e in events
                      if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch")
    if len(launches) > 1:
        d = [b - a for a, b in zip(launches, launches[1:], strict=False)]
        d.sort()
        print(f"\n## host: {len(launches)} cudaGraphLaunch calls, spacing median "
              f"{d[len(d) // 2]:.0f} us, p90 {d[int(len(d) * 0.9)]:.0f} us")


if __name__ == "__main__":
    main()
