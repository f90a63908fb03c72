"""The torch trainer's steps on the CPU, one at a time: forward with head, backward, optimizer
step (gradient clipping included) and the process's minor page faults of each (issue 43:
``run.retain_host_memory``; the cpu accelerator's fused AdamW).

    python bench/cpu_train_steps.py --steps 6                # SmolLM2, fresh batches
    python bench/cpu_train_steps.py --steps 6 --same         # one batch, every step
    python bench/cpu_train_steps.py --steps 6 --retain       # freed memory kept (glibc)

The batch (``train_ab.grpo_batch``): one prompt of 20-40 random tokens x 8 samples of 128
random tokens (the CPU workload of ``grpo_vs_trl.py --workload smollm2``); the trainer
(``train_ab.torch_trainer``) as the executors build it; fp32, 2 threads,
``examples/smollm2/model`` (``examples/smollm2/convert.py``).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # grpo_vs_trl, train_ab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--same", action="store_true", help="the same batch every step")
    ap.add_argument("--retain", action="store_true", help="run.retain_host_memory's mallopt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=str(REPO / "examples" / "smollm2" / "model"))
    a = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as grpo_vs_trl.py
    import slime_core.trainkit.accumulate as accumulate
    import slime_std.trainer.torch_trainer as torch_trainer_module
    import torch
    from grpo_vs_trl import WORKLOADS
    from slime_core.runtime import host_memory
    from train_ab import grpo_batch, torch_trainer

    torch.set_num_threads(a.threads)
    if a.retain and (why := host_memory.retain_freed_memory()):
        raise SystemExit(f"--retain: {why}")
    trainer = torch_trainer({"model": {"path": a.model, "dtype": "float32"},
                             "train": {"lr": 1e-6, "grad_clip": 1.0, "weight_decay": 0.0}})
    vocab = trainer.model.config.vocab_size
    spent = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper

    torch_trainer_module.response_log_probs = timed("forward",
                                                    torch_trainer_module.response_log_probs)
    accumulate.Accumulation.backward = timed("backward", accumulate.Accumulation.backward)
    accumulate.Accumulation.step = timed("optimizer", accumulate.Accumulation.step)
    for step in range(a.steps):
        g = torch.Generator().manual_seed(0 if a.same else step)
        prompt_tokens = int(torch.randint(20, 40, (1,), generator=g))
        batch = grpo_batch(WORKLOADS["smollm2"], vocab, prompt_tokens, g)
        spent.update(dict.fromkeys(spent, 0.0))
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        trainer.train_step(batch, step)
        wall = time.perf_counter() - t
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        print(f"step {step}: {wall:.2f} s  " + "  ".join(f"{k} {v:.2f}" for k, v in spent.items())
              + f"  page faults {faults}", flush=True)


if __name__ == "__main__":
    main()
