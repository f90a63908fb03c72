"""The torch trainer's host work per training step, counted in torch operators (issue 43).

A small model's GPU training step waits on its host: the SmolLM2 example's step on an H100
(``results/profile_h100_2026-12-06_fourth``) kept the GPU idle ~50 of ~145 ms while the host
issued per-sample operators (masks, metrics, advantages, padding). Operators are counted
here on the CPU with a micro model (2 layers, width 16: the model's own work is small, so
what remains is the per-sample bookkeeping), for a batch of the SmolLM2 example's shape
(16 prompts x 8 samples, ~60 prompt tokens, 32 response tokens). The count is deterministic
(unlike the host's time, printed beside it), and each operator on a GPU is a dispatch and
often a kernel launch.

    python bench/train_host_ops.py                 # the defaults (shared-prefix forward on the CPU)
    python bench/train_host_ops.py --set train.shared_prefix=false --top 30
    python bench/train_host_ops.py --graphed     # the GPU's graphed path (capture stood in for)

Prints the operators of one step grouped by the innermost slime function issuing them
(aten operators not nested in another aten operator), then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # grpo_vs_trl, train_ab


def micro_model(work: Path) -> Path:
    """A 2-layer, 16-wide Qwen2 with grpo_vs_trl's character tokenizer, saved once."""
    from grpo_vs_trl import tiny_model_dir

    return tiny_model_dir(work, "micro_qwen2_w16", width=16, layers=2, heads=1)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``section.key=value`` (TOML value) -> nested config data."""
    from slime_core.config.loader import parse_override

    data: dict[str, Any] = {}
    for item in items:
        section, name, value = parse_override(item)
        data.setdefault(section, {})[name] = value
    return data


def count_ops(events: Any) -> tuple[int, Counter[str]]:
    """Aten operators not nested in another operator, by the innermost repository frame."""
    repo = str(Path(__file__).resolve().parents[1]) + "/"
    by: Counter[str] = Counter()
    total = 0
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        if parent is not None and parent.name.startswith(("aten::", "autograd::")):
            continue
        total += 1
        where = "(autograd's backward, no repository frame)"
        while parent is not None:
            if repo in parent.name:
                where = parent.name.split(repo)[-1]
                break
            parent = parent.cpu_parent
        by[where] += 1
    return total, by


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=60)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--set", action="append", default=[], help="section.key=value")
    ap.add_argument("--graphed", action="store_true",
                    help="train.cuda_graphs' decoder, its capture stood in for on the CPU "
                         "(the decoder's own operators are still counted: it runs eagerly)")
    ap.add_argument("--work-dir", default=str(Path(tempfile.gettempdir()) / "slime-bench"))
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    from train_ab import grpo_batch, torch_trainer

    torch.set_num_threads(1)
    path = micro_model(Path(a.work_dir))
    data = parse_sets(a.set)
    data.setdefault("model", {})["path"] = str(path)
    data.setdefault("train", {}).setdefault("lr", 1e-6)
    trainer = torch_trainer(data)
    if a.graphed:  # the GPU's train.cuda_graphs path, with the CPU stand-in for the capture
        from slime_core.testing import static_buffer_graphs
        from slime_core.trainkit.graphed_decoder import GraphedDecoder

        trainer.graphed = GraphedDecoder(trainer.model.model, trainer.pad_id,
                                         make_graphed=static_buffer_graphs)
    vocab = trainer.model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    shape = {"prompts": a.prompts, "group": a.group, "new": a.new}

    def batch() -> Any:
        return grpo_batch(shape, vocab, a.prompt_tokens, g)

    for i in range(2):  # warm-up
        trainer.train_step(batch(), i)
    times = []
    for i in range(a.reps):
        b = batch()
        t0 = time.perf_counter()
        trainer.train_step(b, 2 + i)
        times.append(time.perf_counter() - t0)
    b = batch()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        trainer.train_step(b, 2 + a.reps)
    total, by = count_ops(prof.events())
    for where, n in by.most_common(a.top):
        print(f"{n:7d}  {where}")
    print(json.dumps({"samples": a.prompts * a.group, "ops_per_step": total,
                      "host_step_s_median": round(statistics.median(times), 4),
                      "settings": a.set + (["graphed (CPU stand-in)"] if a.graphed else [])}))


if __name__ == "__main__":
    main()
