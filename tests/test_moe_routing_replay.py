"""Rollout routing replay (R3) through ``core run``: a tiny Qwen3-MoE trains with
``train.routing_replay = "rollout"``; a corrupt routing record is refused naming the sample
and field; replay asked of a dense model stops the run before any model loads (no run
directory); the megatron backend replays too."""

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


class _NoReplayBackend:
    """A trainer backend whose record does not say it replays routing."""

    @hookimpl
    def slime_register_trainer_backends(self) -> list[Any]:
        from slime_hookspecs import TrainerBackendRecord

        def never(*_: Any) -> Any:
            raise AssertionError("the trainer must not be built")

        return [TrainerBackendRecord(name="no_replay", factory=never, summary="test")]


def test_a_backend_that_cannot_replay_is_refused_before_the_model_loads(base_config) -> None:
    """The driver's check before any model loads (``check_routing_replay``) names the backend
    whose record lacks ``routing_replay``."""
    import dataclasses
    import types

    from slime_core.moe.preflight import check_routing_replay
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), None, (),
                              _moe(base_config))
    manager.register_object(_NoReplayBackend(), "no_replay_backend")
    # (what the check reads; a config naming an unknown backend does not resolve)
    asked = types.SimpleNamespace(train=dataclasses.replace(config.train, backend="no_replay"),
                                  rollout=config.rollout, model=config.model)
    with pytest.raises(ValueError, match="trainer backend 'no_replay' .*cannot replay routing"):
        check_routing_replay(manager, asked)


def test_megatron_backend_replays(base_config, run_slime) -> None:
    """The megatron backend replays on megatron-core's router: the engine's routing, replayed,
    is what its routers choose too (agreement 1)."""
    config = _moe(base_config)
    config["train"]["backend"] = "megatron"
    rows = read_metrics(run_slime(config, select=("slime_grpo", "megatron_backend")))
    assert len(rows) == 2
    for row in rows:
        assert row["train/routing_replay_agreement"] == 1.0
        assert row["train/mismatch_abs_logprob_diff"] < 1e-4


def test_tiny_moe_example_learns(tmp_path: Path, run_slime) -> None:
    """examples/tiny_moe in short: the upcycled model (built here, not committed) gains reward
    within three GRPO steps with routing replay on (the README's curve, in small)."""
    import importlib.util
    import shutil

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("tiny_moe_make",
                                                  root / "examples/tiny_moe/make_model.py")
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    from transformers import LlamaForCausalLM

    model_dir = tmp_path / "model"
    make.upcycle(LlamaForCausalLM.from_pretrained(str(make.DENSE))).save_pretrained(str(model_dir))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(make.DENSE / name, model_dir / name)
    run_dir = run_slime({
        "run": {"num_rollouts": 3, "run_dir": str(tmp_path / "run"), "progress": False,
                "loggers": ["jsonl"], "seed": 1},
        "model": {"path": str(model_dir)},
        "data": {"path": str(root / "examples/tiny_arith/train.jsonl")},
        "rollout": {"batch_size": 16, "n_samples_per_prompt": 8, "max_new_tokens": 8,
                    "reward": "exact"},
        "train": {"lr": 1e-4, "adam_betas": [0.9, 0.99], "routing_replay": "rollout"},
    })
    rewards = [row["rollout/reward_mean"] for row in read_metrics(run_dir)]
    assert rewards[-1] > rewards[0] + 0.2, rewards
