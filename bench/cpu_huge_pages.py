"""Transparent huge pages under the CPU engine's weights: one local-engine generate of 8 x 128
forced tokens (SmolLM2, fp32, packed weights) before and after the process's heap is
collapsed into 2 MiB pages (``madvise(MADV_HUGEPAGE)`` then ``MADV_COLLAPSE``, Linux 6.1+),
in one process. The lead it measures: a decode step streams every weight from memory, and
4 KiB pages cost a TLB miss every 4 KiB (a plain read of the weights 14.7 -> 17.5 GB/s with
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, bench README, fourteenth session).

    python bench/cpu_huge_pages.py [--model examples/smollm2/model] [--rounds 3]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from pathlib import Path

import torch

MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # linux/mman.h
HUGE = 2 << 20
REPO = Path(__file__).resolve().parents[1]


def collapse_heap() -> tuple[int, int, float]:
    """Collapse the 2 MiB-aligned part of ``[heap]`` into huge pages: (bytes collapsed,
    bytes asked, seconds)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = asked = 0
    start = time.perf_counter()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[5] != "[heap]":
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        a, b = (lo + HUGE - 1) & ~(HUGE - 1), hi & ~(HUGE - 1)
        if b <= a:
            continue
        libc.madvise(a, b - a, MADV_HUGEPAGE)
        asked += b - a
        done += (b - a) if libc.madvise(a, b - a, MADV_COLLAPSE) == 0 else 0
    return done, asked, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(REPO / "examples" / "smollm2" / "model"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    from slime_core.testing import build_test_config
    from slime_hookspecs import SamplingParams
    from slime_std.engine.local_engine import LocalEngine

    torch.set_num_threads(a.threads)
    params = [SamplingParams(temperature=1.0, max_new_tokens=128, ignore_eos=True)] * 8
    prompt = list(range(100, 160))
    config = build_test_config(model={"path": a.model, "dtype": "float32"},
                               rollout={"packed_weights": True})
    engine = LocalEngine(config, 0, None)
    engine.generate([prompt] * 8, params)  # first call: allocations

    def rounds() -> list[float]:
        out = []
        for _ in range(a.rounds):
            start = time.perf_counter()
            engine.generate([prompt] * 8, params)
            out.append(time.perf_counter() - start)
        return out

    before = rounds()
    done, asked, seconds = collapse_heap()
    after = rounds()
    print(f"generate 8 x 128: {statistics.median(before):.2f} s before, "
          f"{statistics.median(after):.2f} s after collapsing {done >> 20} of {asked >> 20} MiB "
          f"of heap into huge pages ({seconds:.2f} s); rounds {before} / {after}")


if __name__ == "__main__":
    main()
