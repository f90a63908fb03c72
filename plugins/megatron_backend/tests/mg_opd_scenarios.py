"""What each rank runs in the on-policy distillation tests: the megatron backend next to the
torch backend on one batch, with ``[opd]`` on (``slime_core.algo.opd``).

``opd_compare(rank, world_size, data, mode)`` builds both backends from the same config (the
torch one unsharded in this process, the megatron one over every rank as tensor parallelism),
runs one train step of each on copies of one GRPO batch and returns the largest difference of
the advantages and the teacher log-probs, and both ``train/opd_reverse_kl``. In engine mode the
teacher's log-probs are put into the batch directly, as the rollout side's conversion does.
"""

from __future__ import annotations

from typing import Any

import torch
from mg_support import copy_batch, grpo_batch, make_config


def _max_diff(a: list[Any], b: list[Any]) -> float:
    return max(float((torch.as_tensor(x) - torch.as_tensor(y)).abs().max())
               for x, y in zip(a, b, strict=True))


def opd_compare(rank: int, world_size: int, data: dict[str, Any], mode: str) -> dict[str, Any]:
    from megatron_backend.trainer import MegatronTrainer
    from slime_std.trainer.torch_trainer import TorchTrainer

    config = make_config({**data, "opd": {**data["opd"], "mode": mode}})
    torch_tr = TorchTrainer(config, 0, 1, None)
    mg = MegatronTrainer(config, rank, world_size, None)
    batch = grpo_batch(mg.layout.vocab)
    if mode == "engine":  # what slime_core.runner.convert puts there from the teacher engine
        g = torch.Generator().manual_seed(11)
        batch.teacher_log_probs = [-5.0 * torch.rand(r, generator=g)
                                   for r in batch.response_lengths]
    b_t, b_m = copy_batch(batch), copy_batch(batch)
    # train_step prepares the batch in place: teacher and old log-probs, then advantages
    m_t = torch_tr.train_step(b_t, 0)
    m_m = mg.train_step(b_m, 0)
    return {
        "dp": (mg.data_parallel_rank, mg.data_parallel_size),
        "teacher_built": mg.teacher_model is not None,
        "teacher_hidden": None if mg.teacher_layout is None else mg.teacher_layout.hidden,
        "teacher_diff": _max_diff(b_t.teacher_log_probs, b_m.teacher_log_probs),
        "old_diff": _max_diff(b_t.old_log_probs, b_m.old_log_probs),
        "adv_diff": _max_diff(b_t.advantages, b_m.advantages),
        "kl": (m_t.get("train/opd_reverse_kl"), m_m.get("train/opd_reverse_kl")),
        "loss": (m_t["train/loss"], m_m["train/loss"]),
        "grad_norm": (m_t["train/grad_norm"], m_m["train/grad_norm"]),
    }


def opd_both_modes(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """Trainer and engine mode in one process (megatron-core is imported once per spawn)."""
    return {mode: opd_compare(rank, world_size, data, mode) for mode in ("trainer", "engine")}
