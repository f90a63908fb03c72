"""What an MoE model costs in the ``local`` engine and the ``torch`` trainer's forward, and
what recording its routing adds (CPU).

    python examples/tiny_moe/make_model.py   # once
    python bench/moe_decode.py --reps 3

The tiny_moe model is the tiny_arith Llama with each MLP upcycled into 4 experts, top-2
(examples/tiny_moe): the same attention, twice the MLP arithmetic per token. Rows: tiny_arith
dense with the fused decoder (the default for Llama), the same through the transformers
forward (``rollout.fused_decoder = false``), tiny_moe through the transformers forward (the
only path for MoE models) without and with routing recording (``train.routing_replay``).
Generation: 256 completions of tiny_arith prompts (32 prompts x 8, 8 new tokens, T = 1,
EOS ignored so every row decodes all 8), as one GRPO step of the example; best of ``--reps``.
Then the trainer's no-grad log-prob forward of those sequences with and without replay.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from slime_core.moe.routing import from_record
    from slime_core.testing import build_test_config
    from slime_core.trainkit.batching import response_log_probs
    from slime_hookspecs import SamplingParams
    from slime_std.engine.local_engine import LocalEngine
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(str(ROOT / "examples" / "tiny_arith" / "model"))
    rows = [json.loads(x) for x in (ROOT / "examples/tiny_arith/eval.jsonl").read_text().splitlines()]
    prompts = [tok(r["prompt"])["input_ids"] for r in rows[:32] for _ in range(8)]
    params = [SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True, seed=i)
              for i in range(len(prompts))]
    cases = {
        "dense, fused decoder": ("tiny_arith", {}, "off"),
        "dense, transformers forward": ("tiny_arith", {"fused_decoder": False}, "off"),
        "moe, transformers forward": ("tiny_moe", {}, "off"),
        "moe, recording routing": ("tiny_moe", {}, "rollout"),
    }
    out = {}
    for name, (example, rollout, replay) in cases.items():
        config = build_test_config(model={"path": str(ROOT / "examples" / example / "model")},
                                   rollout=rollout, train={"routing_replay": replay})
        engine = LocalEngine(config)
        engine.generate(prompts[:8], params[:8])  # warm-up
        best = float("inf")
        for _ in range(args.reps):
            t0 = time.perf_counter()
            outs = engine.generate(prompts, params)
            best = min(best, time.perf_counter() - t0)
        new = sum(len(o.token_ids) for o in outs)
        row = {"generate_s": best, "new_tokens_per_s": new / best}
        if example == "tiny_moe":
            seqs = [torch.tensor(p + o.token_ids) for p, o in zip(prompts, outs, strict=True)]
            resp = [len(o.token_ids) for o in outs]
            kwargs = {}
            if replay == "rollout":
                kwargs = {"routing": engine._routing,
                          "routes": [from_record(o.routed_experts) for o in outs]}
                row["record_bytes_per_sample"] = sum(o.routed_experts.nbytes for o in outs) / len(outs)
            best_fwd = float("inf")
            with torch.no_grad():
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    response_log_probs(engine._model, seqs, resp, 1.0, 0, **kwargs)
                    best_fwd = min(best_fwd, time.perf_counter() - t0)
            row["logprob_forward_s"] = best_fwd
        out[name] = row
        print(f"{name:>30}: " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()),
              file=sys.stderr)
        engine.shutdown()
    if args.out:
        Path(args.out).write_text(json.dumps({"threads": args.threads, "reps": args.reps,
                                              "results": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
