"""One local-engine ``generate``, called on the main thread, on a kept worker thread, on a new
thread each call, and through ``asyncio.to_thread``, alternating in one process (CPU).

Checks the reason ``slime_core/rollout/engine_host.py`` gives for running a synchronous
rollout's engine calls on the main thread (a worker thread was said to lose torch's intra-op
parallelism). Prints the median and the fastest of each.

    python bench/engine_thread.py --config examples/tiny_arith/grpo.toml --prompts 32 --tokens 32
    python bench/engine_thread.py --config examples/smollm2/grpo_cpu.toml --prompts 8 --tokens 16
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
from slime_hookspecs import SamplingParams

from slime_core.context import set_manager
from slime_std.engine.local_engine import LocalEngine
from slime_core.pluginmgr import PluginSelection
from slime_core.session import resolve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/tiny_arith/grpo.toml")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=12)
    args = ap.parse_args()
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), args.config, (), None)
    set_manager(manager)
    engine = LocalEngine(config, 0, None)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8] for _ in range(args.prompts)]
    params = [SamplingParams(temperature=1.0, max_new_tokens=args.tokens, ignore_eos=True)
              for _ in prompts]

    def once() -> float:
        t = time.perf_counter()
        engine.generate(prompts, params)
        return time.perf_counter() - t

    pool = ThreadPoolExecutor(1)

    def new_thread() -> float:
        box: dict[str, float] = {}
        th = threading.Thread(target=lambda: box.setdefault("t", once()))
        th.start()
        th.join()
        return box["t"]

    loop = asyncio.new_event_loop()
    ways: dict[str, Callable[[], float]] = {
        "main thread": once,
        "kept worker thread": lambda: pool.submit(once).result(),
        "new thread per call": new_thread,
        "asyncio.to_thread": lambda: loop.run_until_complete(asyncio.to_thread(once)),
    }
    times: dict[str, list[float]] = {k: [] for k in ways}
    for fn in ways.values():  # warm-up
        fn()
    for _ in range(args.reps):
        for name, fn in ways.items():
            times[name].append(fn())
    print(f"{args.config}: {args.prompts} prompts x {args.tokens} tokens, "
          f"torch threads {torch.get_num_threads()}, {args.reps} reps")
    for name, ts in times.items():
        print(f"  {name:20s} median {statistics.median(ts):.3f} s   fastest {min(ts):.3f} s")


if __name__ == "__main__":
    main()
