"""Scoring one rollout's samples with the ``math`` reward: on the rollout's thread against
``rollout.reward_processes`` workers (issue 43: math-verify took 97 ms of a 0.6 s SmolLM2 step
on an H100 host, serially). The samples look like the SmolLM2 example's (its held-out prompts,
answers in a sentence, one in three wrong), each response distinct so the reward's memo
(``slime_std.rewards.math_reward``) never answers; the workers are started and warmed before
the timing, as they are after a run's first step. Prints one JSON line per setting.

    python bench/reward_processes.py --samples 128 --workers 0,2
    python bench/reward_processes.py --samples 128 --workers 2 --group 8   # as a rollout asks
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from slime_core.rewards.processes import InProcesses, RewardProcesses
from slime_core.testing import build_test_config
from slime_hookspecs import Sample
from slime_std.rewards import make_math_reward

EVAL = Path(__file__).resolve().parent.parent / "examples" / "smollm2" / "eval.jsonl"


def samples(n: int, offset: int) -> list[Sample]:
    rows = [json.loads(x) for x in EVAL.read_text().splitlines()]
    out = []
    for i in range(n):
        row = rows[(i + offset) % len(rows)]
        answer = int(row["label"]) + (1 if i % 3 == 0 else 0)
        out.append(Sample(index=i, prompt=row["prompt"], label=row["label"],
                          response=f"Adding them (try {offset}.{i}) gives {answer}. "
                                   f"The answer is {answer}."))
    return out


async def score(fn: object, batch: list[Sample], group: int) -> list[float]:
    if isinstance(fn, InProcesses):  # as the rollout does: group by group, in one loop turn
        futures = [f for lo in range(0, len(batch), group)
                   for f in fn.submit_many(batch[lo:lo + group])]
        return [await asyncio.wrap_future(f) for f in futures]
    return [fn(s) for s in batch]  # type: ignore[operator]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--group", type=int, default=0,
                    help="samples a group, each group asked for on its own as the rollout "
                         "does (0: the whole batch in one call)")
    a = ap.parse_args()
    fn = make_math_reward(build_test_config())
    offset = 0
    for w in (int(x) for x in a.workers.split(",")):
        pool = RewardProcesses(w) if w else None
        call = InProcesses(fn, pool, "math") if pool else fn
        group = a.group or a.samples
        asyncio.run(score(call, samples(4 * max(w, 1), offset := offset + 1), group))  # warm up
        times, rewards = [], []
        for _ in range(a.reps):
            batch = samples(a.samples, offset := offset + 1)
            t = time.perf_counter()
            rewards = asyncio.run(score(call, batch, group))
            times.append(time.perf_counter() - t)
        if pool:
            pool.close()
        print(json.dumps({"workers": w, "samples": a.samples, "group": group,
                          "seconds_median": statistics.median(times),
                          "ms_per_sample": 1e3 * statistics.median(times) / a.samples,
                          "reward_mean": sum(rewards) / len(rewards)}), flush=True)


if __name__ == "__main__":
    main()
