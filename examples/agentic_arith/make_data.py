"""Write the agentic_arith task: 3-digit multiplication, where a calculator tool helps.

    python examples/agentic_arith/make_data.py     # train.jsonl, eval.jsonl, sft.jsonl, tokenizer/

* ``train.jsonl`` / ``eval.jsonl``: prompts ``"347*291="`` (raw text, no chat template) with the
  product as label; the pairs (a, b) with 100 <= a, b <= 999 and a six-digit product are
  shuffled with a fixed seed;
  the first EVAL_SIZE are held out for evaluation, the next TRAIN_SIZE are the training set.
* ``sft.jsonl``: demonstrations for the warm start (prompts from train.jsonl only), a mix of
  three behaviours: TOOL_SHARE call the calculator and copy its result; BAD_CALL_SHARE call
  a tool that does not exist (``calc``), get the executor's error and answer directly; the
  rest answer directly. The direct answers are right, but a ~130k-parameter model cannot learn
  3-digit products, so imitating them gives wrong answers. The warm-started model therefore
  samples all three behaviours, its tool-call success rate is well below 1, and RL has to find
  out that a correct call pays. Each demonstration is exactly what a multi-turn rollout
  produces: the Hermes call, the observation made by the real tool executor in the default
  plain-text format of ``[tools]`` (DEFAULT_RAW_OBSERVATION), then the answer.
* ``tokenizer/``: character level plus the tags ``<tool_call>`` ``</tool_call>``
  ``<tool_response>`` ``</tool_response>`` ``<answer>`` ``</answer>`` as single (non-special)
  tokens, as a Qwen tokenizer has them, and a few merges of the call's JSON (MERGES) as a BPE
  vocabulary would have, so a call is ~15 tokens; ``<eos>`` ends a turn.

Byte-for-byte deterministic.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = 2026
EVAL_SIZE = 200
TRAIN_SIZE = 20000
SFT_ROWS = 20000
TOOL_SHARE = 0.45  # demonstrations that call the calculator correctly and copy its result
BAD_CALL_SHARE = 0.25  # ... that call a tool that does not exist, then answer directly
TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<answer>",
        "</answer>"]
# a few merges, as a BPE vocabulary has them, so a call is ~15 tokens instead of ~60 characters
MERGES = ['{"name":"', '","arguments":{"', '":"', '"}}', "calculator", "expression"]
OBSERVATION = "\n<tool_response>\n{observation}\n</tool_response>\n"  # DEFAULT_RAW_OBSERVATION


def problems() -> list[dict[str, str]]:
    # six-digit products only: every prompt, call and answer then has the same layout, so the
    # tiny model can copy by position (variable lengths need induction heads, a much longer
    # warm start)
    return [{"prompt": f"{a}*{b}=", "label": str(a * b)}
            for a in range(100, 1000) for b in range(100, 1000) if a * b >= 100_000]


@functools.lru_cache(maxsize=1)
def executor() -> Any:  # the rollout's own executor, with the calculator enabled
    from slime_agent.executor import ToolExecutor
    from slime_agent.tools import tool_records

    record = next(r for r in tool_records() if r.name == "calculator")
    return ToolExecutor(None, {"calculator": record}, timeout=5.0)


def observation(name: str, arguments: dict[str, str]) -> str:
    """What the rollout's tool executor answers to the call ``name(**arguments)``."""
    from slime_agent.parsers import ToolCall

    return asyncio.run(executor().run(ToolCall(name, arguments), None)).text


def tool_demo(prompt: str, label: str, name: str = "calculator") -> str:
    args = {"expression": prompt.rstrip("=")}
    call = {"name": name, "arguments": args}
    result = observation(name, args)
    if name == "calculator":
        assert result == label, (prompt, result, label)
    return ("<tool_call>" + json.dumps(call, separators=(",", ":")) + "</tool_call>"
            + OBSERVATION.format(observation=result) + f"<answer>{label}</answer>")


def direct_demo(label: str) -> str:
    return f"<answer>{label}</answer>"


def write_tokenizer(out: Path) -> None:
    from slime_core.testing import write_char_tokenizer

    # the tags are not special: stop strings and the parser see them in the decoded text
    write_char_tokenizer(out, extra_tokens=TAGS + MERGES, chat_template=None)


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args()
    rows = problems()
    rng = random.Random(SEED)
    rng.shuffle(rows)
    evaluation, train = rows[:EVAL_SIZE], rows[EVAL_SIZE:EVAL_SIZE + TRAIN_SIZE]
    sft = []
    for r in train[:SFT_ROWS]:
        u = rng.random()
        if u < TOOL_SHARE:
            target = tool_demo(r["prompt"], r["label"])
        elif u < TOOL_SHARE + BAD_CALL_SHARE:
            target = tool_demo(r["prompt"], r["label"], name="calc")
        else:
            target = direct_demo(r["label"])
        sft.append({"prompt": r["prompt"], "label": target})
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "train.jsonl", train)
    write_jsonl(out / "eval.jsonl", evaluation)
    write_jsonl(out / "sft.jsonl", sft)
    write_tokenizer(out / "tokenizer")
    good = sum('"calculator"' in r["label"] for r in sft)
    bad = sum('"calc"' in r["label"] for r in sft)
    print(f"wrote {len(train)} train, {len(evaluation)} eval and {len(sft)} SFT rows "
          f"({good} correct calls, {bad} bad calls) and tokenizer/ to {out}")


if __name__ == "__main__":
    main()
