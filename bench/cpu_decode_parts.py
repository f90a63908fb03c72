"""Where the CPU engine's decode time goes, SmolLM2 fp32 with packed weights, in one process:

* ``generate``: one local-engine generate of 8 x 128 forced tokens three ways, alternating:
  as it is; with every packed product replaced by a copy of its first output (the products'
  time taken out); and with the attention replaced by zeros too. The differences are the
  products' and the attention's share; what is left is every other operator and Python.
* ``products``: each SmolLM2 weight shape (8 rows against 40 copies of the weight, so they
  stream from memory as in a decode step; 3 copies of the head) by method: oneDNN's packed
  product (``rollout.packed_weights``), ``x @ W^T``, ``(W @ x^T)^T``, and a sum over the same
  weights (what reading them costs).

    python bench/cpu_decode_parts.py [--model examples/smollm2/model] [--rounds 3]

The OpenMP wait policy matters (``OMP_WAIT_POLICY=PASSIVE``, ``grpo_vs_trl.py``'s default,
wakes a sleeping thread at every parallel region); run it under both.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from cpu_packed_weights import _median  # a warm-up call, then the median of reps

REPO = Path(__file__).resolve().parents[1]
SHAPES = {"qkv": (960, 576), "gate_up": (3072, 576), "o": (576, 576), "down": (576, 1536),
          "head": (49152, 576)}  # SmolLM2-135M's projections, [N, K]


def generate_parts(model: str, rounds: int) -> None:
    from slime_core.testing import build_test_config
    from slime_hookspecs import SamplingParams
    from slime_std.engine import fused_decoder
    from slime_std.engine.local_engine import LocalEngine

    params = [SamplingParams(temperature=1.0, max_new_tokens=128, ignore_eos=True)] * 8
    prompt = list(range(100, 160))
    config = build_test_config(model={"path": model, "dtype": "float32"},
                               rollout={"packed_weights": True})
    engine = LocalEngine(config, 0, None)
    real_linear = fused_decoder.packed_weights.packed_linear
    real_sdpa = F.scaled_dot_product_attention
    first: dict[tuple[int, ...], torch.Tensor] = {}

    def cached_linear(x: torch.Tensor, packed: torch.Tensor, bias: Any) -> torch.Tensor:
        key = (x.shape[0], packed.size(0), packed.size(1))
        if key not in first:
            first[key] = real_linear(x, packed, bias)
        return first[key].clone()

    def zero_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *a: Any,
                  **kw: Any) -> torch.Tensor:
        return q.new_zeros(q.shape[:-1] + (v.shape[-1],))

    ways = {"as is": (real_linear, real_sdpa), "no products": (cached_linear, real_sdpa),
            "no products, no attention": (cached_linear, zero_sdpa)}
    seconds: dict[str, list[float]] = {w: [] for w in ways}
    try:
        for _ in range(rounds):
            for way, (linear, sdpa) in ways.items():
                fused_decoder.packed_weights.packed_linear = linear  # type: ignore[assignment]
                F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
                seconds[way].append(_median(lambda: engine.generate([prompt] * 8, params), 1))
    finally:
        fused_decoder.packed_weights.packed_linear = real_linear  # type: ignore[assignment]
        F.scaled_dot_product_attention = real_sdpa  # type: ignore[assignment]
    med = {w: statistics.median(s) for w, s in seconds.items()}
    products = med["as is"] - med["no products"]
    attention = med["no products"] - med["no products, no attention"]
    print(f"generate 8 x 128: {med['as is']:.2f} s; products {products:.2f} s "
          f"({products / 128 * 1e3:.1f} ms a step), attention {attention:.2f} s, the rest "
          f"{med['no products, no attention']:.2f} s; rounds {seconds}")


def product_shapes(rounds: int) -> None:
    from slime_std.engine import packed_weights

    for name, (n, k) in SHAPES.items():
        copies = 3 if name == "head" else 40
        weights = [torch.randn(n, k) for _ in range(copies)]
        packed = [packed_weights.pack(w) for w in weights]
        x = torch.randn(8, k)
        ways = {"packed": lambda: [packed_weights.packed_linear(x, p, None) for p in packed],
                "x @ W^T": lambda: [torch.mm(x, w.t()) for w in weights],
                "(W @ x^T)^T": lambda: [torch.mm(w, x.t()).t() for w in weights],
                "sum": lambda: [w.sum() for w in weights]}
        us: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(rounds):
            for way, fn in ways.items():
                us[way].append(_median(fn, 7) / copies * 1e6)
        mib = n * k * 4 / 2**20
        print(f"{name:8s} [{n}, {k}] {mib:6.1f} MiB: " + ", ".join(
            f"{w} {statistics.median(v):7.1f} us ({mib * 2**20 / statistics.median(v) / 1e3:4.1f}"
            " GB/s)" for w, v in us.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(REPO / "examples" / "smollm2" / "model"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=["generate", "products"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.only != "products":
        generate_parts(a.model, a.rounds)
    if a.only != "generate":
        product_shapes(a.rounds)


if __name__ == "__main__":
    main()
