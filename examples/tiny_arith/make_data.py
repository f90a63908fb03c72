"""Write the tiny_arith task data: 2-digit addition, verifiable by exact match.

    python examples/tiny_arith/make_data.py            # writes train.jsonl and eval.jsonl next to this file

Every pair (a, b) with 0 <= a, b <= 99 is one problem: prompt "a+b=" (raw text, no chat
template), label str(a + b). The 10,000 problems are shuffled with a fixed seed; the first
EVAL_SIZE form eval.jsonl (held out: their prompts never appear in train.jsonl, and the
SFT warm start in make_model.py only reads train.jsonl), the rest form train.jsonl.
The output is byte-for-byte deterministic.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 1234
EVAL_SIZE = 200


def problems() -> list[dict[str, str]]:
    return [{"prompt": f"{a}+{b}=", "label": str(a + b)} for a in range(100) for b in range(100)]


def split(
    seed: int = SEED, eval_size: int = EVAL_SIZE
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    rows = problems()
    random.Random(seed).shuffle(rows)
    return rows[eval_size:], rows[:eval_size]


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=HERE)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--eval-size", type=int, default=EVAL_SIZE)
    args = parser.parse_args()
    train, evaluation = split(args.seed, args.eval_size)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in evaluation}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out_dir / "train.jsonl", train)
    write_jsonl(args.out_dir / "eval.jsonl", evaluation)
    print(f"wrote {len(train)} train and {len(evaluation)} eval prompts to {args.out_dir}")


if __name__ == "__main__":
    main()
