"""Training health on the megatron backend (issue 38, item 1): a non-finite loss or batch on
one data-parallel rank skips the optimizer step on every rank, with AdamW and with the
distributed (ZeRO-1) optimizer; a healthy step afterwards steps every rank alike."""

from __future__ import annotations

from typing import Any

import torch
from mg_scenarios import off_policy
from mg_support import base_data, grpo_batch, make_config, spawn


def _weights(trainer: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.export_weights().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _scenarios(rank: int, world_size: int) -> dict[str, Any]:
    from megatron_backend.trainer import MegatronTrainer

    out: dict[str, Any] = {}
    for zero in (False, True):
        config = make_config(base_data(train={"num_ranks": 2},
                                       megatron={"use_distributed_optimizer": zero}))
        mg = MegatronTrainer(config, rank, world_size, None)
        before = _weights(mg)
        lps = mg.compute_log_probs(grpo_batch(mg.layout.vocab, seed=rank), "actor")

        # rank 1's loss is NaN (its old log-probs are), rank 0's finite
        batch = grpo_batch(mg.layout.vocab, seed=rank)
        off_policy(batch, lps)
        if rank == 1:
            batch.old_log_probs[0] = torch.full_like(batch.old_log_probs[0], float("nan"))
        loss_step = mg.train_step(batch, 0)

        # rank 0's share has a NaN reward: no step runs anywhere
        batch = grpo_batch(mg.layout.vocab, seed=rank)
        off_policy(batch, lps)
        if rank == 0:
            batch.rewards[0] = float("nan")
        batch_step = mg.train_step(batch, 1)
        unchanged = _same(before, _weights(mg))

        batch = grpo_batch(mg.layout.vocab, seed=rank)
        off_policy(batch, lps)
        healthy = mg.train_step(batch, 2)
        out[f"zero={zero}"] = {
            "loss_step": {k: v for k, v in loss_step.items() if "skipped" in k or "nonfinite" in k},
            "batch_step": {k: v for k, v in batch_step.items()
                           if "skipped" in k or "nonfinite" in k},
            "unchanged": unchanged, "healthy": healthy["train/skipped_steps"],
            "after": _weights(mg), "lr_steps": mg.scheduler.last_epoch,
        }
    return out


def test_ranks_skip_together_and_keep_their_weights() -> None:
    per_rank = spawn(_scenarios, 2)
    for zero in ("zero=False", "zero=True"):
        r0, r1 = (r[zero] for r in per_rank)
        for r in (r0, r1):
            assert r["loss_step"] == {"train/skipped_steps": 1.0, "train/nonfinite_loss": 1.0,
                                      "train/nonfinite_grad_norm": 1.0}, (zero, r)
            assert r["batch_step"]["train/skipped_steps"] == 1.0
            assert r["batch_step"]["train/nonfinite_rewards"] == 1.0
            assert r["unchanged"], zero
            assert r["healthy"] == 0.0
            assert r["lr_steps"] == 1  # only the healthy step moved the schedule
        assert _same(r0["after"], r1["after"])  # and moved both replicas alike
