"""What the host did while the GPU idled, from a torch-profiler Chrome trace.

``bench/trace_summary.py`` says how long the GPU idled in each phase; this says why. Every
stretch of at least ``--min-gap`` ms without a kernel, copy or memset is listed with, for each
thread that ran Python in it, the repository's functions that held it: each function's time
inside the gap not spent in another repository function it called (so a reward function's
time includes the library it calls, and a driver's loop only its own lines). With Python
frames (``profile.with_stack = true``) it names functions; Python frames make the host's
work several times slower, so without them it names the trace's ``record_function`` ranges
(the run's phases, the engine's spans) instead, at the host's own speed. With
``profile.scope = "all"`` the local engine's decoding thread is in the trace too.

    python bench/idle_gaps.py RUN_DIR/profile/step_6-7.json --min-gap 1 --top 6
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from typing import Any

# a frame of this repository: "path/to/slime_core/x.py(12): name" (a site-packages path too,
# when the packages are installed rather than on PYTHONPATH)
REPO_FRAME = re.compile(r"(slime_[a-z_]+|bench)/[\w/]+\.py\(\d+\): ")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def load(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def idle_gaps(events: list[dict[str, Any]], min_us: float) -> list[tuple[float, float]]:
    """(start, end) in trace microseconds of every stretch of at least ``min_us`` with no GPU
    activity, between the first and the last."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") in GPU_CATS and "dur" in e)
    gaps, end = [], spans[0][1] if spans else 0.0
    for s, e in spans[1:]:
        if s - end >= min_us:
            gaps.append((end, s))
        end = max(end, e)
    return gaps


def short(name: str) -> str:
    """``.../slime_core/runner/driver.py(120): step`` -> ``slime_core/runner/driver.py:120 step``."""
    m = REPO_FRAME.search(name)
    text = name[m.start():] if m else name
    return re.sub(r"\((\d+)\): ", r":\1 ", text)


def self_times(frames: list[dict[str, Any]], lo: float, hi: float) -> dict[str, float]:
    """Per repository function (by :func:`short` name), its microseconds inside [lo, hi] not
    covered by a repository function it called. ``frames``: one thread's Python events (or
    its ``record_function`` ranges, every one of which counts)."""
    repo = sorted((f for f in frames if (f.get("cat") != "python_function"
                                         or REPO_FRAME.search(f["name"]))
                   and f["ts"] < hi and f["ts"] + f["dur"] > lo),
                  key=lambda f: (f["ts"], -f["dur"]))
    out: dict[str, float] = defaultdict(float)
    stack: list[tuple[dict[str, Any], float]] = []  # (frame, its clipped span) open

    def clip(f: dict[str, Any]) -> float:
        return max(0.0, min(hi, f["ts"] + f["dur"]) - max(lo, f["ts"]))

    for f in repo:
        while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= f["ts"]:
            stack.pop()
        span = clip(f)
        out[short(f["name"])] += span
        if stack:  # the caller's own time loses what this call took
            out[short(stack[-1][0]["name"])] -= span
        stack.append((f, span))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--min-gap", type=float, default=1.0, help="milliseconds")
    ap.add_argument("--top", type=int, default=6, help="functions a thread and gap")
    a = ap.parse_args()
    events = load(a.trace)
    frames: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    cat = ("python_function" if any(e.get("cat") == "python_function" for e in events)
           else "user_annotation")
    for e in events:
        if e.get("cat") == cat and "dur" in e:
            frames[e.get("tid")].append(e)
    gaps = idle_gaps(events, a.min_gap * 1e3)
    t0 = min((e["ts"] for e in events if "ts" in e and e.get("ph") == "X"), default=0.0)
    total = sum(h - lo for lo, h in gaps)
    print(f"# {len(gaps)} GPU-idle stretches >= {a.min_gap} ms, {total / 1e3:.1f} ms in all; "
          f"{sum(len(v) for v in frames.values())} {cat} events on {len(frames)} threads")
    for lo, hi in gaps:
        print(f"\n## +{(lo - t0) / 1e3:.1f} ms: idle {(hi - lo) / 1e3:.2f} ms")
        for tid, fs in frames.items():
            own = self_times(fs, lo, hi)
            best = sorted(((t, n) for n, t in own.items() if t > 0), reverse=True)[:a.top]
            if best:
                print(f"  thread {tid}: " + "; ".join(f"{n} {t / 1e3:.2f}" for t, n in best))


if __name__ == "__main__":
    main()
