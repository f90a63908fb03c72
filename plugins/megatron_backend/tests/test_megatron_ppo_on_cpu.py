"""PPO (slime_ppo's gae estimator) with the critic on the megatron backend: a GPTModel with a
value head, TP-sharded like the actor (``TrainerBackendRecord.critic_factory``).

One PPO step (two actor and two critic optimizer steps, the value clip engaged on the second)
from the same state equals the torch backend's (its Hugging Face value model) within 1e-4,
actor and critic metrics alike, and so do the critic's values after the step, for TP=1 here
and TP=2 and PP=2 over two gloo processes; a checkpoint resumes the critic exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mg_scenarios import ppo_compare, ppo_data, ppo_resume
from mg_support import spawn

TOL = 1e-4


def check(result: dict[str, Any]) -> None:
    t, m = result["torch"], result["megatron"]
    assert (t["critic"], m["critic"]) == ("TorchCritic", "MegatronCritic")
    assert set(t["metrics"]) == set(m["metrics"]) and "train/value_loss" in m["metrics"]
    for key, want in t["metrics"].items():
        assert m["metrics"][key] == pytest.approx(want, abs=TOL), (key, result)
    # the step has signal: the critic learned and its second step clipped some values
    assert t["metrics"]["train/value_clipfrac"] > 0
    for a, b in zip(t["values"], m["values"], strict=True):
        assert float((a - b).abs().max()) < TOL, result


def check_resume(r: dict[str, Any]) -> None:
    assert r["fresh_differs"] and r["values_equal"]
    m_a, m_b = r["metrics"]
    assert m_a == m_b


@pytest.mark.usefixtures("one_thread")
def test_ppo_step_tp1_matches_torch_backend() -> None:
    check(ppo_compare(0, 1, ppo_data()))


@pytest.mark.usefixtures("one_thread")
def test_ppo_tp1_resumes_exactly(tmp_path: Path) -> None:
    check_resume(ppo_resume(0, 1, ppo_data(), str(tmp_path / "ckpt")))


def _two_ranks(rank: int, world_size: int, megatron: dict[str, int], ckpt: str) -> dict[str, Any]:
    data = ppo_data(megatron=megatron, train={"num_ranks": 2})
    return {"compare": ppo_compare(rank, world_size, data),
            "resume": ppo_resume(rank, world_size, data, ckpt)}


@pytest.mark.parametrize(("megatron", "shards"), [
    ({"tensor_model_parallel_size": 2}, ("mp_rank_00_000", "mp_rank_01_000")),
    # the critic's trunk in the actor's two pipeline stages, the value head on the last; one
    # checkpoint shard per stage
    ({"pipeline_model_parallel_size": 2}, ("mp_rank_00_000", "mp_rank_00_001")),
    # two data-parallel ranks (both train the whole batch: the summed, reweighted step is the
    # one-process step) with the actor's and the critic's AdamW state sharded over them
    ({"use_distributed_optimizer": True}, ("mp_rank_00_000",)),
], ids=["tp2", "pp2", "dp2_distributed_optimizer"])
def test_ppo_step_on_two_ranks_matches_torch_backend_and_resumes(
        tmp_path: Path, megatron: dict[str, int], shards: tuple[str, str]) -> None:
    ckpt = tmp_path / "ckpt"
    for result in spawn(_two_ranks, 2, megatron, str(ckpt)):
        check(result["compare"])
        check_resume(result["resume"])
    for shard in shards:
        assert (ckpt / "critic" / shard / "critic_optim.pt").is_file()
        for dp_rank in (0, 1):
            dp_file = ckpt / "critic" / shard / f"critic_optim.dp{dp_rank:03d}.pt"
            assert dp_file.is_file() == bool(megatron.get("use_distributed_optimizer")), dp_file
