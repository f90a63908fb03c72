"""One GRPO training step with a ``train`` option off and on (``--option``: ``fused_head``,
``shared_prefix``, ``fused_norm``; ``micro_batch_tokens`` compares 8192 ("off") with 16384), alternating in one process on batches of the same shape
(the VM drifts by tens of percent between runs, so only a same-process A/B shows what an
option saves). CPU, fp32, the benchmark workloads' shapes: each group's samples share one
random prompt, as in GRPO.

    python bench/train_ab.py --workload smollm2 --reps 3                  # train.fused_head
    python bench/train_ab.py --workload tiny --reps 5 --option shared_prefix
    python bench/train_ab.py --workload smollm2 --reps 4 --option micro_batch_tokens
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


# option -> its (off, on) values
OPTIONS = {"fused_head": (False, True), "shared_prefix": (False, True),
           "fused_norm": (False, True), "micro_batch_tokens": (8192, 16384)}


def grpo_batch(w: dict[str, Any], vocab: int, prompt_tokens: int,
               g: torch.Generator) -> Any:
    """A GRPO batch of workload ``w``'s shape (``grpo_vs_trl.WORKLOADS``): each group's
    samples share one random prompt of ``prompt_tokens`` tokens, then ``w["new"]`` random
    tokens; rewards 0, 1, 2, 0, ..."""
    from slime_hookspecs import TrainBatch

    samples = w["prompts"] * w["group"]
    resp = [w["new"]] * samples
    prompts = [torch.randint(3, vocab, (prompt_tokens,), generator=g)
               for _ in range(w["prompts"])]
    tokens = [torch.cat((prompts[i // w["group"]], torch.randint(3, vocab, (r,), generator=g)))
              for i, r in enumerate(resp)]
    return TrainBatch(
        tokens=tokens, response_lengths=resp, loss_masks=[torch.ones(r) for r in resp],
        rewards=[float(i % 3) for i in range(samples)],
        raw_rewards=[float(i % 3) for i in range(samples)],
        group_indices=[i // w["group"] for i in range(samples)],
        rollout_log_probs=[-torch.rand(r, generator=g) for r in resp])


def torch_trainer(data: dict[str, Any]) -> Any:
    """The torch trainer of a GRPO run with config ``data``, built as the executors build it:
    with the run's accelerator object (which decides, e.g., the fused AdamW)."""
    from slime_core.api import accelerator_record
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve
    from slime_std.trainer.torch_trainer import TorchTrainer

    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), data=data)
    set_manager(manager)
    return TorchTrainer(config, accelerator=accelerator_record(config).factory())


def main() -> None:
    from grpo_vs_trl import WORKLOADS, model_dir

    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=["tiny", "smollm2"], default="smollm2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--option", choices=sorted(OPTIONS), default="fused_head")
    ap.add_argument("--work-dir", default=str(Path(tempfile.gettempdir()) / "slime-bench"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    w = WORKLOADS[a.workload]
    samples = w["prompts"] * w["group"]
    path = model_dir(a.workload, Path(a.work_dir))
    g = torch.Generator().manual_seed(0)

    def batch(vocab: int) -> Any:
        return grpo_batch(w, vocab, a.prompt_tokens, g)

    trainers = {fused: torch_trainer({"model": {"path": str(path)},
                                      "train": {a.option: OPTIONS[a.option][int(fused)],
                                                "lr": 1e-6}})
                for fused in (False, True)}
    vocab = trainers[True].model.config.vocab_size
    times: dict[bool, list[float]] = {False: [], True: []}
    trainers[False].train_step(batch(vocab), 0)  # warm-up, not timed
    trainers[True].train_step(batch(vocab), 0)
    for rep in range(a.reps):
        for fused in ((False, True) if rep % 2 == 0 else (True, False)):
            b = batch(vocab)
            t = time.perf_counter()
            trainers[fused].train_step(b, rep + 1)
            times[fused].append(time.perf_counter() - t)
    out = {"workload": a.workload, "option": a.option, "samples": samples,
           "prompt_tokens": a.prompt_tokens, "new_tokens": w["new"], "threads": a.threads,
           "off_s": times[False], "on_s": times[True],
           "ratio_median": statistics.median(times[True]) / statistics.median(times[False])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
