"""The torch trainer's steps on the CPU, one at a time: forward with head, backward, optimizer
step (gradient clipping included) and the process's minor page faults of each (issue 43:
``run.retain_host_memory``; the cpu accelerator's fused AdamW).

    python bench/cpu_train_steps.py --steps 6                # SmolLM2, fresh batches
    python bench/cpu_train_steps.py --steps 6 --same         # one batch, every step
    python bench/cpu_train_steps.py --steps 6 --retain       # freed memory kept (glibc)

The batch: one prompt of 20-40 random tokens x 8 samples of 128 random tokens (the CPU
workload of ``grpo_vs_trl.py --workload smollm2``), random 0/1 rewards; fp32, 2 threads,
``examples/smollm2/model`` (``examples/smollm2/convert.py``).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


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
    import slime_std.trainer.torch_trainer as torch_trainer
    import torch
    from slime_core.api import accelerator_record
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runtime import host_memory
    from slime_core.session import resolve
    from slime_hookspecs import TrainBatch

    torch.set_num_threads(a.threads)
    if a.retain and (why := host_memory.retain_freed_memory()):
        raise SystemExit(f"--retain: {why}")
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"], autoload=False), data={
        "model": {"path": a.model, "dtype": "float32"},
        "train": {"lr": 1e-6, "grad_clip": 1.0, "weight_decay": 0.0},
    })
    set_manager(manager)
    # the run's accelerator object, as the executors build it (it decides the fused AdamW)
    trainer = torch_trainer.TorchTrainer(config, accelerator=accelerator_record(config).factory())
    spent = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper

    torch_trainer.response_log_probs = timed("forward", torch_trainer.response_log_probs)
    accumulate.Accumulation.backward = timed("backward", accumulate.Accumulation.backward)
    accumulate.Accumulation.step = timed("optimizer", accumulate.Accumulation.step)
    for step in range(a.steps):
        g = torch.Generator().manual_seed(0 if a.same else step)
        prompt = torch.randint(3, 40000, (int(torch.randint(20, 40, (1,), generator=g)),),
                               generator=g)
        resp = [128] * 8
        tokens = [torch.cat((prompt, torch.randint(3, 40000, (r,), generator=g))) for r in resp]
        rewards = torch.rand(8, generator=g).round().tolist()
        batch = TrainBatch(tokens=tokens, response_lengths=resp,
                           loss_masks=[torch.ones(r) for r in resp], rewards=rewards,
                           raw_rewards=rewards, group_indices=[0] * 8,
                           rollout_log_probs=[-torch.rand(r, generator=g) for r in resp])
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
