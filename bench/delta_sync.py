"""Bytes a disk weight sync writes: full versions against deltas (``weights.delta``).

For each model and precision, real AdamW steps (lr 5e-6, the SmolLM2 example's; a language-model
loss on fixed random tokens, so every weight gets a gradient) and after each step a sync through
the real ``disk`` transport: the first sync is full, the next ones deltas. bf16 runs step fp32
master copies and write bf16 weights back, as ``train.master_weights`` does.

    python bench/delta_sync.py --out bench/results/delta_sync_cpu_2026-12-04.json
    python bench/delta_sync.py --models tiny --steps 3          # a quick check

Printed per model x precision x encoding: full bytes, the mean bytes of a delta sync and the
ratio, and the seconds to encode and write one.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
MODELS = {"tiny": REPO / "examples" / "tiny_arith" / "model",
          "smollm2": REPO / "examples" / "smollm2" / "model"}


def _transport(encoding: str, root: Path) -> Any:
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.testing import build_test_config
    from slime_core.weights.disk import DiskTransport

    set_manager(SlimePluginManager(PluginSelection(autoload=False)).load())
    cfg = build_test_config(run={"run_dir": str(root)},
                            weights={"transport": "disk", "delta": encoding})
    return DiskTransport(cfg)


def measure(name: str, dtype: torch.dtype, steps: int, lr: float) -> list[dict[str, Any]]:
    from slime_core.trainkit.master import make_adamw
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(MODELS[name], dtype=torch.float32).to(dtype)
    model.train()
    opt = make_adamw(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                     weight_decay=0.0, master_weights=dtype != torch.float32)
    vocab = model.config.vocab_size
    tokens = torch.randint(0, vocab, (4, 64), generator=torch.Generator().manual_seed(1))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        transports = {enc: _transport(enc, Path(tmp) / enc) for enc in ("xor", "overwrite")}
        for step in range(steps + 1):
            if step:
                loss = model(input_ids=tokens, labels=tokens).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
            for enc, tr in transports.items():
                t = time.perf_counter()
                stats = tr.send(weights, step, [])
                rows.append({"model": name, "dtype": str(dtype).removeprefix("torch."),
                             "encoding": enc, "version": step, "delta": bool(stats["delta"]),
                             "bytes": stats["bytes"], "full_bytes": stats["full_bytes"],
                             "seconds": time.perf_counter() - t})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=5e-6)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for name in a.models.split(","):
        if not (MODELS[name] / "config.json").exists():
            raise SystemExit(f"{MODELS[name]} is missing (examples/smollm2/README.md: convert.py)")
        for dtype in (torch.float32, torch.bfloat16):
            rows += measure(name, dtype, a.steps, a.lr)
    print(f"{'model':8} {'dtype':9} {'encoding':9} {'full MB':>8} {'delta MB':>9} "
          f"{'ratio':>6} {'s/delta':>8}")
    for key in sorted({(r["model"], r["dtype"], r["encoding"]) for r in rows}):
        deltas = [r for r in rows if (r["model"], r["dtype"], r["encoding"]) == key and r["delta"]]
        full = deltas[0]["full_bytes"]
        mean = sum(r["bytes"] for r in deltas) / len(deltas)
        secs = sum(r["seconds"] for r in deltas) / len(deltas)
        print(f"{key[0]:8} {key[1]:9} {key[2]:9} {full / 1e6:8.2f} {mean / 1e6:9.3f} "
              f"{mean / full:6.3f} {secs:8.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"lr": a.lr, "steps": a.steps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
