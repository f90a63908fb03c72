"""``rollout.common_prefix`` off and on: the SmolLM2 example's evaluation on the CPU (its 256
held-out prompts under the chat template, greedy, 32 new tokens), and its prefill alone (one
new token), two engines of the same weights alternating in one process. Needs the converted
model (``examples/smollm2/convert.py``).

    OMP_NUM_THREADS=2 python bench/cpu_common_prefix.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench_plugin import report
from slime_core.testing import build_test_config
from slime_hookspecs import SamplingParams
from slime_std.engine.local_engine import LocalEngine

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "examples" / "smollm2" / "model"
EVAL = REPO / "examples" / "smollm2" / "eval.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    rows = [json.loads(x) for x in EVAL.read_text().splitlines()][: args.prompts]
    prompts: list[list[int]] = []
    for r in rows:
        ids: Any = tok.apply_chat_template([{"role": "user", "content": r["prompt"]}],
                                           add_generation_prompt=True, tokenize=True)
        prompts.append(list(ids if isinstance(ids, list) else ids["input_ids"]))
    engines = {on: LocalEngine(build_test_config(model={"path": str(MODEL), "dtype": "float32"},
                                                 rollout={"common_prefix": on,
                                                          "packed_weights": True}), 0, None)
               for on in (False, True)}
    times: dict[str, list[float]] = {}
    outputs: dict[bool, list[list[int]]] = {}
    for r in range(args.rounds):
        for on in (False, True) if r % 2 == 0 else (True, False):
            for new in (1, args.new):
                params = [SamplingParams(temperature=0.0, max_new_tokens=new)] * len(prompts)
                t = time.perf_counter()
                out = engines[on].generate(prompts, params)
                times.setdefault(f"{'prefix' if on else 'whole'}_new{new}", []).append(
                    time.perf_counter() - t)
                if new == args.new:
                    outputs[on] = [o.token_ids for o in out]
    row: dict[str, Any] = {"what": "cpu_common_prefix", "prompts": len(prompts),
                           "new": args.new, "rounds": args.rounds,
                           "prompt_tokens": sum(map(len, prompts)),
                           "same_completions": sum(a == b for a, b in zip(outputs[False],
                                                                          outputs[True],
                                                                          strict=True))}
    for key, xs in sorted(times.items()):
        row[f"{key}_median_s"] = round(statistics.median(xs), 2)
        row[f"{key}_s"] = [round(x, 2) for x in xs]
    report(row, args.out)


if __name__ == "__main__":
    main()
