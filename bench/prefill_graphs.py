"""``rollout.prefill_graphs`` off and on: the local engine's generate at the SmolLM2 example's
rollout shape (16 prompts x 8 samples, prompts of 40-48 tokens, 32 new tokens forced), its
prefill alone (one new token), alternating between two engines of the same seeded weights in
one process (GPU). The SmolLM2-135M shape with seeded weights: no model to carry.

    python bench/prefill_graphs.py --rounds 12 --precision high   # the record's TF32
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_plugin import report
from slime_core.testing import build_test_config, write_char_tokenizer
from slime_hookspecs import SamplingParams
from slime_std.accelerators.devices import TorchAccelerator
from slime_std.engine.local_engine import LocalEngine

SMOLLM2 = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
               num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
               max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True,
               rms_norm_eps=1e-5)


def batch(rng: random.Random, prompts: int, group: int) -> list[list[int]]:
    """``prompts`` distinct prompts of 40-48 tokens (the widest 48: one shape a call), each
    ``group`` times in a row, as a rollout asks."""
    out = []
    for i in range(prompts):
        n = 48 if i == 0 else rng.randint(40, 48)
        p = [rng.randrange(3, 1000) for _ in range(n)]
        out += [p] * group
    return out


def timed(engine: LocalEngine, prompts: list[list[int]], new: int) -> float:
    params = [SamplingParams(temperature=0.7, max_new_tokens=new, ignore_eos=True, seed=1)]
    torch.cuda.synchronize()
    t = time.perf_counter()
    engine.generate(prompts, params * len(prompts))
    torch.cuda.synchronize()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--precision", default="high", help="torch float32 matmul precision")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_float32_matmul_precision(args.precision)
    tok = write_char_tokenizer(Path(tempfile.mkdtemp()) / "tok")
    engines: dict[bool, LocalEngine] = {}
    for on in (False, True):
        cfg = build_test_config(model={"init_config": SMOLLM2, "tokenizer": str(tok),
                                       "dtype": "float32"},
                                rollout={"cuda_graphs": True, "prefill_graphs": on},
                                run={"seed": 1})
        engines[on] = LocalEngine(cfg, 0, TorchAccelerator("cuda"))
    rng = random.Random(0)
    times: dict[str, list[float]] = {}
    for r in range(args.rounds + 3):  # three warm-up rounds: captures
        prompts = batch(rng, args.prompts, args.group)
        for new in (1, args.new):
            for on in (False, True) if r % 2 == 0 else (True, False):
                t = timed(engines[on], prompts, new)
                if r >= 3:
                    times.setdefault(f"{'graphs' if on else 'eager'}_new{new}", []).append(t)
    row: dict[str, Any] = {"what": "prefill_graphs", "gpu": torch.cuda.get_device_name(),
                           "torch": torch.__version__, "precision": args.precision,
                           "prompts": args.prompts, "group": args.group, "new": args.new,
                           "rounds": args.rounds}
    for key, xs in sorted(times.items()):
        row[f"{key}_median_ms"] = round(1000 * statistics.median(xs), 2)
        row[f"{key}_ms"] = [round(1000 * x, 2) for x in xs]
    static = engines[True]._static
    assert static is not None  # cuda_graphs on a CUDA device
    row["prefill_graphs_held"] = sum(len(d._prefills) for d in static._by_shape.values())
    report(row, args.out)


if __name__ == "__main__":
    main()
