"""Checkpoints: Megatron's per-rank state restores exactly, and ``hf/`` loads in transformers.

Train 2 GRPO steps, save, train a 3rd; a fresh trainer that loads the checkpoint and trains the
3rd step must give the same metrics and bit-identical weights (TP=1 here; TP=2 and PP=2 over
two gloo processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from mg_scenarios import resume
from mg_support import base_data, spawn


def check(result: dict[str, Any]) -> None:
    assert result["fresh_differs"]
    m_a, m_b = result["metrics"]
    assert m_a == m_b
    assert result["weights_equal"]
    assert result["rng_equal"]


def check_hf(ckpt: Path, saved: dict[str, torch.Tensor]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = ckpt / "hf"
    assert (hf / "config.json").is_file() and (hf / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    state = model.state_dict()
    assert sorted(state) == sorted(saved)
    for k, v in saved.items():
        assert torch.equal(state[k], v), k
    assert AutoTokenizer.from_pretrained(hf).vocab_size == 260


def test_tp1_save_load_resumes_exactly(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    result = resume(0, 1, base_data(), str(ckpt))
    check(result)
    check_hf(ckpt, result["saved"])
    assert (ckpt / "megatron" / "mp_rank_00_000" / "model_optim.pt").is_file()
    assert (ckpt / "megatron" / "rng" / "rank_00000.pt").is_file()


TP2 = {"tensor_model_parallel_size": 2}
PP2 = {"pipeline_model_parallel_size": 2}
ZERO = {"use_distributed_optimizer": True}  # TP=1 on two ranks: two data-parallel ranks
# (model, [megatron], the shard directories the two ranks write)
CASES = [(None, TP2, ("mp_rank_00_000", "mp_rank_01_000")),
         ("qwen2", TP2, ("mp_rank_00_000", "mp_rank_01_000")),
         (None, PP2, ("mp_rank_00_000", "mp_rank_00_001")),
         (None, ZERO, ("mp_rank_00_000", "mp_rank_00_000"))]


def _two_ranks(rank: int, world_size: int, ckpt: str, qwen2: str) -> list[dict[str, Any]]:
    return [resume(rank, world_size,
                   base_data({"path": qwen2} if model else None, megatron=mg,
                             train={"num_ranks": 2}), f"{ckpt}-{i}")
            for i, (model, mg, _) in enumerate(CASES)]


def test_tp2_pp2_and_distributed_optimizer_save_load_resume_exactly(tmp_path: Path, tiny_qwen2: Path) -> None:
    ckpt = tmp_path / "ckpt"
    per_rank = spawn(_two_ranks, 2, str(ckpt), str(tiny_qwen2))
    for results in per_rank:
        for result in results:
            check(result)
    for i, (result, (_, _, shard_dirs)) in enumerate(zip(per_rank[0], CASES, strict=True)):
        path = Path(f"{ckpt}-{i}")
        check_hf(path, result["saved"])
        for rank, shard in enumerate(shard_dirs):
            assert (path / "megatron" / shard / "model_optim.pt").is_file()
            assert (path / "megatron" / "rng" / f"rank_{rank:05d}.pt").is_file()
            # the distributed optimizer's state: one file per data-parallel rank
            dp_file = path / "megatron" / shard / f"model_optim.dp{rank:03d}.pt"
            assert dp_file.is_file() == (CASES[i][1] is ZERO), dp_file


def _tp2_dp2(rank: int, world_size: int, ckpt: str) -> dict[str, Any]:
    return resume(rank, world_size, base_data(
        megatron={**TP2, **ZERO}, train={"num_ranks": 4}), ckpt)


def test_tp2_times_dp2_distributed_optimizer_resumes_exactly(tmp_path: Path) -> None:
    # four processes: each TP shard's AdamW state is split over the data-parallel pair, so
    # the checkpoint holds a file per (TP index, DP rank)
    ckpt = tmp_path / "ckpt"
    for result in spawn(_tp2_dp2, 4, str(ckpt)):
        check(result)
    for tp in (0, 1):
        for dp in (0, 1):
            assert (ckpt / "megatron" / f"mp_rank_{tp:02d}_000" / f"model_optim.dp{dp:03d}.pt").is_file()
