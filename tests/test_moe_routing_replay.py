"""Rollout routing replay (R3) through ``core run``: a tiny Qwen3-MoE trains with
``train.routing_replay = "rollout"``; a corrupt routing record is refused naming the sample
and field; replay asked of a dense model or of a backend that cannot replay stops the run
before any model loads (no run directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slime_core.testing import TINY_QWEN3_MOE
from slime_hookspecs import RoutedExperts, hookimpl

from tests.conftest import read_metrics


def _moe(base_config: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    base_config["model"]["init_config"] = dict(TINY_QWEN3_MOE)
    base_config["train"]["routing_replay"] = "rollout"
    base_config["data"].pop("eval_path")
    return base_config


def test_replayed_run_logs_agreement_and_record_size(base_config, run_slime) -> None:
    run_dir = run_slime(_moe(base_config))
    rows = read_metrics(run_dir)
    assert len(rows) == 2
    for row in rows:
        # the engine's routing, replayed, is what the trainer's routers choose too (same
        # weights, fp32): agreement 1 and no log-prob mismatch
        assert row["train/routing_replay_agreement"] == 1.0
        assert row["train/mismatch_abs_logprob_diff"] < 1e-4
        # 2 MoE layers x top-2 x 1 byte per position, ~10 prompt + response positions
        assert 4 * 5 <= row["rollout/routing_record_bytes"] <= 4 * 40


class _Corrupt:
    """Shifts every recorded expert id out of range (an external engine's bad array)."""

    @hookimpl
    def slime_after_generate(self, config: Any, sample: Any, rollout_id: int,
                             evaluation: bool) -> None:
        rec = sample.rollout_routed_experts
        if rec is not None:
            sample.rollout_routed_experts = RoutedExperts(
                shape=rec.shape, dtype=rec.dtype, data=bytes(b + 100 for b in rec.data))


def test_corrupt_record_is_refused_naming_sample_and_field(base_config, run_slime) -> None:
    with pytest.raises(ValueError, match=r"sample group=\d+ index=\d+: TrainBatch.routed_experts:"
                                         r" expert ids span \[1\d\d, 1\d\d\], the model has "
                                         r"experts 0..7"):
        run_slime(_moe(base_config), plugins=[_Corrupt()])


def test_replay_of_a_dense_model_stops_before_the_model_loads(base_config, run_slime,
                                                              tmp_path: Path) -> None:
    base_config["train"]["routing_replay"] = "rollout"
    with pytest.raises(ValueError, match="has no mixture-of-experts layers"):
        run_slime(base_config)
    assert not (tmp_path / "run").exists()


def test_megatron_backend_is_refused_until_it_replays(base_config, run_slime,
                                                     tmp_path: Path) -> None:
    config = _moe(base_config)
    config["train"]["backend"] = "megatron"
    with pytest.raises(ValueError, match="trainer backend 'megatron' .*cannot replay routing"):
        run_slime(config, select=("slime_grpo", "megatron_backend"))
    assert not (tmp_path / "run").exists()
