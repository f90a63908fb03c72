"""Write the addition prompts of the SmolLM2 example: ``train.jsonl`` and held-out ``eval.jsonl``.

Every ordered pair (a, b) with 1 <= a, b <= MAX_TERM is one prompt "What is a + b?" labelled
with the sum; a seeded shuffle holds out EVAL_SIZE pairs for evaluation, so no held-out pair is
ever trained on. SmolLM2-135M-Instruct answers about a quarter of these right when greedy
(it often rambles past the sum, or ends on another number), and its samples at temperature 0.7
get some of most groups right: GRPO has signal from the first step.

    python examples/smollm2/make_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_TERM = 30
EVAL_SIZE = 256
SEED = 0


def rows() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train, eval) rows ``{"prompt", "label"}``, disjoint by pair."""
    pairs = [(a, b) for a in range(1, MAX_TERM + 1) for b in range(1, MAX_TERM + 1)]
    random.Random(SEED).shuffle(pairs)
    out = [{"prompt": f"What is {a} + {b}?", "label": str(a + b)} for a, b in pairs]
    return out[EVAL_SIZE:], out[:EVAL_SIZE]


def main() -> None:
    train, held_out = rows()
    for name, part in (("train.jsonl", train), ("eval.jsonl", held_out)):
        (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in part))
        print(f"wrote {len(part)} prompts to {HERE / name}")


if __name__ == "__main__":
    main()
