"""Router auxiliary and z losses through ``core run``: a tiny Qwen3-MoE run with
``train.moe_aux_loss_coef`` / ``moe_z_loss_coef`` (and routing replay) logs both; asked of a
dense model they stop the run before any model loads (no run directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slime_core.testing import TINY_QWEN3_MOE

from tests.conftest import read_metrics


def test_a_run_with_router_losses_logs_them(base_config, run_slime) -> None:
    base_config["model"]["init_config"] = dict(TINY_QWEN3_MOE)
    base_config["train"].update(routing_replay="rollout", moe_aux_loss_coef=0.01,
                                moe_z_loss_coef=0.001)
    base_config["data"].pop("eval_path")
    rows = read_metrics(run_slime(base_config))
    assert len(rows) == 2
    for row in rows:
        # uniform routing gives top_k = 2; a random router is near it
        assert 1.9 < row["train/moe_aux_loss"] < 4.0, row
        assert row["train/moe_z_loss"] > 0, row


def test_router_losses_of_a_dense_model_stop_before_the_model_loads(base_config, run_slime,
                                                                    tmp_path: Path) -> None:
    base_config["train"]["moe_z_loss_coef"] = 0.001
    with pytest.raises(ValueError, match=r"train.moe_z_loss_coef = 0.001: .*no mixture-of-experts"):
        run_slime(base_config)
    assert not (tmp_path / "run").exists()
