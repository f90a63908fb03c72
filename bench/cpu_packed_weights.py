"""``rollout.packed_weights`` on the CPU: decode-sized products from weights packed for oneDNN
against torch's row-major product, side by side in one process.

Two measurements, each alternating plain and packed rounds:

* ``products``: a decode step's products of a SmolLM2-shaped model (30 layers of fused q/k/v,
  o, fused gate/up and down weights, the 49152-row head; random weights, so no model files),
  8 rows, every weight streamed from memory in layer order as a decode step reads them; the
  median seconds a step and the bytes read per second, against a plain sum over the same
  weights (what the memory gives);
* ``generate`` (with ``--model``, e.g. examples/smollm2/model): one local-engine generate of
  8 x 128 forced tokens from a 60-token prompt with ``rollout.packed_weights`` false and true.

    python bench/cpu_packed_weights.py [--dtype bfloat16|float32] [--model DIR] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

HIDDEN, INTER, LAYERS, VOCAB, Q, KV = 576, 1536, 30, 49152, 576, 192  # SmolLM2-135M
ROWS = 8


def _median(fn: Callable[[], Any], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def products(dtype: torch.dtype, rounds: int, reps: int) -> dict[str, Any]:
    from slime_std.engine.packed_weights import pack, packed_linear

    gen = torch.Generator().manual_seed(0)
    shapes = [(Q + 2 * KV, HIDDEN), (HIDDEN, Q), (2 * INTER, HIDDEN), (HIDDEN, INTER)]
    weights = [(torch.randn(s, generator=gen) / 30).to(dtype)
               for _ in range(LAYERS) for s in shapes]
    weights.append((torch.randn(VOCAB, HIDDEN, generator=gen) / 30).to(dtype))
    packed = [pack(w) for w in weights]
    inputs = {k: torch.randn(ROWS, k, generator=gen).to(dtype) for k in (HIDDEN, INTER)}
    nbytes = sum(w.numel() * w.element_size() for w in weights)

    def plain() -> None:  # the fused decoder's unpacked CPU form, (W @ x^T)^T
        for w in weights:
            torch.mm(w, inputs[w.shape[1]].t())

    def packed_step() -> None:
        for w, p in zip(weights, packed, strict=True):
            packed_linear(inputs[w.shape[1]], p, None)

    def read() -> None:
        for w in weights:
            w.sum()

    rows: dict[str, list[float]] = {"plain": [], "packed": [], "sum": []}
    for _ in range(rounds):
        rows["plain"].append(_median(plain, reps))
        rows["packed"].append(_median(packed_step, reps))
        rows["sum"].append(_median(read, reps))
    out: dict[str, Any] = {"dtype": str(dtype), "bytes": nbytes}
    for name, times in rows.items():
        best = statistics.median(times)
        out[name] = {"s": best, "GB/s": nbytes / best / 1e9, "rounds": times}
    out["plain_over_packed"] = out["plain"]["s"] / out["packed"]["s"]
    return out


def generate(model: str, dtype: str, rounds: int) -> dict[str, Any]:
    from slime_core.testing import build_test_config
    from slime_hookspecs import SamplingParams
    from slime_std.engine.local_engine import LocalEngine

    params = [SamplingParams(temperature=1.0, max_new_tokens=128, ignore_eos=True)] * ROWS
    prompt = list(range(100, 160))
    engines = {}
    for packed in (False, True):
        config = build_test_config(model={"path": model, "dtype": "float32"},
                                   rollout={"dtype": dtype, "packed_weights": packed})
        engines[packed] = LocalEngine(config, 0, None)
        engines[packed].generate([prompt] * ROWS, params)  # first call: allocations
    rows: dict[str, list[float]] = {"plain": [], "packed": []}
    for _ in range(rounds):
        for packed, name in ((False, "plain"), (True, "packed")):
            start = time.perf_counter()
            engines[packed].generate([prompt] * ROWS, params)
            rows[name].append(time.perf_counter() - start)
    out: dict[str, Any] = {name: {"s": statistics.median(t), "rounds": t}
                           for name, t in rows.items()}
    out["plain_over_packed"] = out["plain"]["s"] / out["packed"]["s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--model", default="", help="a model directory: also time generate")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result: dict[str, Any] = {"threads": args.threads, "torch": torch.__version__,
                              "products": products(getattr(torch, args.dtype), args.rounds,
                                                   args.reps)}
    p = result["products"]
    print(f"products a step ({args.dtype}, {ROWS} rows, {p['bytes'] / 1e9:.2f} GB): "
          f"plain {p['plain']['s'] * 1e3:.1f} ms ({p['plain']['GB/s']:.1f} GB/s), "
          f"packed {p['packed']['s'] * 1e3:.1f} ms ({p['packed']['GB/s']:.1f} GB/s), "
          f"a sum over the weights {p['sum']['GB/s']:.1f} GB/s; "
          f"plain / packed {p['plain_over_packed']:.2f}")
    if args.model:
        g = result["generate"] = generate(args.model, args.dtype, args.rounds)
        print(f"generate {ROWS} x 128 tokens: plain {g['plain']['s']:.2f} s, packed "
              f"{g['packed']['s']:.2f} s; plain / packed {g['plain_over_packed']:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
