"""One optimizer step of a Qwen2-0.5B-shaped bf16 model (random weights and gradients), in one
process: AdamW on the bf16 weights (``train.master_weights = false``), :class:`MasterAdamW` as
it is (re-reads only the weights written since the last step), the same with every weight
re-read each step (``reread()``: its elementwise pass, the 2026-12-02 third session's step
without the host syncs) and with the third session's re-read (a host sync per weight).
Milliseconds, median of ``--reps`` (synchronised wall time).

    python bench/master_step.py [--reps 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from slime_core.trainkit.master import MasterAdamW


def old_refresh(copy: torch.Tensor, current: torch.Tensor) -> None:
    """The re-read of the third session of 2026-12-02 (``.any()``: one host sync a weight)."""
    stale = copy.to(current.dtype) != current
    if stale.any():
        copy[stale] = current[stale].to(copy.dtype)


def main() -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                      num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                      tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    adamw = {"lr": 1e-6, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.0, "fused": True}

    def grads() -> None:
        for p in params:
            p.grad = torch.randn_like(p)

    def timed(step) -> float:
        times = []
        for _ in range(a.reps + 2):
            grads()
            torch.cuda.synchronize()
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return statistics.median(times[2:]) * 1e3

    row = {"what": "master_step", "params": sum(p.numel() for p in params), "tensors": len(params)}
    row["adamw_bf16_ms"] = timed(torch.optim.AdamW(params, **adamw).step)
    master = MasterAdamW(params, **adamw)
    row["master_ms"] = timed(master.step)

    def reread_step() -> None:
        master.reread()
        master.step()
    row["master_reread_every_step_ms"] = timed(reread_step)

    def old_step() -> None:
        for p, m in zip(master.model_params, master.masters, strict=True):
            old_refresh(m, p)
        master._versions.mark()
        master.step()
    row["master_sync_refresh_ms"] = timed(old_step)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
