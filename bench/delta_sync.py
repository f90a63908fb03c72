"""Bytes the ``disk`` weight transport writes per sync: full versions against delta versions
(``weights.delta = "xor"`` / ``"overwrite"``), over real AdamW steps, in one process.

For each model, weight dtype, learning rate and mode, the model trains ``--steps`` AdamW steps
(next-token loss on the example's prompts and answers; Adam's update is ~lr per element
whatever the loss, so the bytes that change are those an RL step at that lr changes) and the
real transport sends every version to a real local engine: version 0 is full, each later
one a delta in the delta modes. Per sync it records the bytes written, the full version's
bytes, the fraction of elements whose bits changed, the seconds (write + engine apply) and
whether the engine serves the trainer's weights bit for bit. Each mode repeats the same
training from the same seed, so the modes see the same weights.

    python bench/delta_sync.py --models examples/tiny_arith/model examples/smollm2/model
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]


def _batches(model_dir: Path, tokenizer: Any, n: int) -> list[torch.Tensor]:
    """``n`` batches of 8 "prompt answer" texts from the example's train file next to the model
    (or the tiny arithmetic one)."""
    data = model_dir.parent / "train.jsonl"
    if not data.is_file():
        data = ROOT / "examples" / "tiny_arith" / "train.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()[: 8 * n]]
    texts = [f"{r['prompt']} {r['label']}" for r in rows]
    out = []
    for i in range(n):
        enc = tokenizer(texts[8 * i: 8 * i + 8], return_tensors="pt", padding=True)
        out.append(enc["input_ids"])
    return out


def _changed_fraction(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor]) -> float:
    from slime_std.weights.delta import _bits

    changed = total = 0
    for k, t in new.items():
        changed += int((_bits(t) != _bits(old[k])).sum())
        total += t.numel()
    return changed / max(total, 1)


def run_one(model_dir: Path, dtype: torch.dtype, lr: float, mode: str, steps: int,
            workdir: Path) -> list[dict[str, Any]]:
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.testing import build_test_config
    from slime_std.engine.local_engine import LocalEngine
    from slime_std.weights.disk import DiskTransport
    from transformers import AutoModelForCausalLM, AutoTokenizer

    set_manager(SlimePluginManager(PluginSelection(autoload=False)).load())
    config = build_test_config(
        model={"path": str(model_dir)}, run={"output_dir": str(workdir)},
        weights={"transport": "disk", "dir": str(workdir / f"w-{mode}"), "delta": mode})
    engine = LocalEngine(config, 0, None)
    transport = DiskTransport(config)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    batches = _batches(model_dir, tok, steps)
    rows: list[dict[str, Any]] = []
    prev: dict[str, torch.Tensor] | None = None
    for version in range(steps + 1):
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        stats = transport.send(weights, version, [engine])
        served = engine.state_dict()
        exact = all(torch.equal(served[k], v.to(served[k].dtype)) for k, v in weights.items())
        rows.append({
            "model": model_dir.name if model_dir.name != "model" else model_dir.parent.name,
            "dtype": str(dtype).removeprefix("torch."), "lr": lr, "mode": mode,
            "version": version, "written_bytes": int(stats["written_bytes"]),
            "full_bytes": int(stats["full_bytes"]), "delta": bool(stats["delta"]),
            "changed_fraction": None if prev is None else _changed_fraction(weights, prev),
            "seconds": round(stats["seconds"], 3), "bit_exact": exact,
        })
        print(json.dumps(rows[-1]), flush=True)
        prev = weights
        if version < steps:
            ids = batches[version]
            loss = model(input_ids=ids, attention_mask=ids != tok.pad_token_id,
                         labels=ids.masked_fill(ids == tok.pad_token_id, -100)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    del engine, transport
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["examples/tiny_arith/model",
                                                     "examples/smollm2/model"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-6, 5e-6])
    ap.add_argument("--modes", nargs="+", default=["off", "xor", "overwrite"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", default=f"bench/results/delta_sync_{time.strftime('%Y-%m-%d')}.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.models:
            for dt in args.dtypes:
                for lr in args.lrs:
                    for mode in args.modes:
                        rows += run_one(Path(m).resolve(), getattr(torch, dt), lr, mode,
                                        args.steps, Path(tmp))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"\n{'model':<11} {'dtype':<8} {'lr':>6} {'mode':<9} {'full MB':>8} "
          f"{'written MB/sync':>15} {'ratio':>6} {'changed':>8} {'s/sync':>7} exact",
          file=sys.stderr)
    keys = sorted({(r["model"], r["dtype"], r["lr"], r["mode"]) for r in rows},
                  key=lambda k: (k[0], k[1], k[2], ["off", "xor", "overwrite"].index(k[3])))
    for key in keys:
        later = [r for r in rows if (r["model"], r["dtype"], r["lr"], r["mode"]) == key
                 and r["version"] > 0]
        w = sum(r["written_bytes"] for r in later) / len(later)
        full = later[0]["full_bytes"]
        ch = sum(r["changed_fraction"] for r in later) / len(later)
        s = sum(r["seconds"] for r in later) / len(later)
        print(f"{key[0]:<11} {key[1]:<8} {key[2]:>6.0e} {key[3]:<9} {full / 1e6:>8.2f} "
              f"{w / 1e6:>15.2f} {w / full:>6.3f} {ch:>8.3f} {s:>7.2f} "
              f"{all(r['bit_exact'] for r in later)}", file=sys.stderr)
    print(f"rows: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
