"""The KL reference: loaded from ``model.ref_path``, moved to the policy's weights every
``train.ref_update_interval`` steps, and kept by a checkpoint once it has moved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.config import ConfigError
from slime_core.context import set_manager
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.testing import build_test_config
from slime_hookspecs import TrainBatch
from slime_std.trainer.torch_trainer import TorchTrainer

MODEL = Path(__file__).resolve().parents[4] / "examples" / "tiny_arith" / "model"
ALGORITHM = {"use_kl_loss": True, "kl_loss_coef": 0.1}


def _config(model: dict[str, Any] | None = None, **train: Any) -> Any:
    """The config of a run with slime_grpo (its records and [algorithm] keys)."""
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema

    manager = SlimePluginManager(PluginSelection(plugins=["slime_grpo"])).load()
    set_manager(manager)
    return load_config(build_schema(manager), data={
        "model": {"path": str(MODEL), **(model or {})}, "algorithm": ALGORITHM,
        "train": {"lr": 1e-3, **train}})


def _batch() -> TrainBatch:
    seqs = [[52, 47, 53, 65, 54, 2], [52, 47, 53, 65, 57, 2],
            [60, 61, 47, 52, 65, 57, 56, 2], [60, 61, 47, 52, 65, 58, 56, 2]]
    lens = [2, 2, 3, 3]
    return TrainBatch(tokens=[torch.tensor(s) for s in seqs], response_lengths=lens,
                      loss_masks=[torch.ones(n) for n in lens], rewards=[1.0, 0.0, 0.0, 1.0],
                      raw_rewards=[1.0, 0.0, 0.0, 1.0], group_indices=[0, 0, 1, 1],
                      rollout_ids=[0] * 4, sample_indices=list(range(4)))


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sb = b.state_dict()
    return all(torch.equal(v, sb[k]) for k, v in a.state_dict().items())


def test_ref_path_loads_the_reference_from_its_own_directory(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(MODEL)
    with torch.no_grad():
        other.model.embed_tokens.weight.mul_(0.5)
    other.save_pretrained(tmp_path / "ref")
    trainer = TorchTrainer(_config())
    default_ref = trainer._ref()
    assert _same(default_ref, trainer.model)  # the initial policy
    moved = TorchTrainer(_config(model={"ref_path": str(tmp_path / "ref")}))
    ref = moved._ref()
    assert torch.equal(ref.state_dict()["model.embed_tokens.weight"],
                       other.state_dict()["model.embed_tokens.weight"])
    batch = _batch()
    assert not torch.allclose(moved.compute_log_probs(batch, "ref")[2],
                              moved.compute_log_probs(batch, "actor")[2])


def test_the_reference_takes_the_policys_weights_every_interval(tmp_path: Path) -> None:
    trainer = TorchTrainer(_config(ref_update_interval=2))
    initial = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    m0 = trainer.train_step(_batch(), 0)
    assert "train/ref_updated" not in m0
    ref = trainer._ref()
    assert all(torch.equal(v, initial[k]) for k, v in ref.state_dict().items())
    assert not _same(ref, trainer.model)  # the policy moved (lr 1e-3), the reference did not
    m1 = trainer.train_step(_batch(), 1)
    assert m1["train/ref_updated"] == 1.0 and _same(trainer._ref(), trainer.model)
    # a checkpoint keeps the moved reference; a resumed trainer does not rebuild the initial one
    trainer.train_step(_batch(), 2)
    trainer.save(str(tmp_path / "ck"))
    assert (tmp_path / "ck" / "ref_model.safetensors").is_file()
    resumed = TorchTrainer(_config(ref_update_interval=2))
    resumed.load(str(tmp_path / "ck"))
    assert _same(resumed._ref(), trainer._ref()) and not _same(resumed._ref(), resumed.model)


def test_a_negative_interval_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="train.ref_update_interval: must be >= 0"):
        build_test_config(train={"ref_update_interval": -1})


def test_the_old_actor_scores_each_sample_with_the_weights_that_generated_it() -> None:
    # weights synced every 2 steps: versions 0 and 2 are snapshotted at the start of steps 0, 2
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema

    manager = SlimePluginManager(PluginSelection(plugins=["slime_grpo"])).load()
    set_manager(manager)
    cfg = load_config(build_schema(manager), data={
        "model": {"path": str(MODEL)}, "train": {"lr": 1e-3, "keep_old_actor": True},
        "weights": {"update_interval": 2}})
    trainer = TorchTrainer(cfg)
    v0 = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train_step(_batch(), 0)
    trainer.train_step(_batch(), 1)
    assert sorted(trainer.old_actor.snapshots) == [0]  # step 1 starts on unsynced weights
    batch = _batch()
    batch.weight_versions = [0, 0, 2, 7]  # 7: never snapshotted (e.g. before a resume)
    m = trainer.train_step(batch, 2)
    assert sorted(trainer.old_actor.snapshots) == [0, 2]
    assert m["train/old_actor_missing"] == 1.0
    # what the denominator was: version 0's weights for the first two samples
    probe = _batch()
    probe.weight_versions = [0, 0, 0, 0]
    old = trainer.compute_log_probs(probe, "old_actor")
    current = TorchTrainer(cfg)
    current.model.load_state_dict(v0)
    fresh = current.compute_log_probs(_batch(), "actor")
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(old, fresh, strict=True))
    assert not torch.allclose(trainer.compute_log_probs(_batch(), "actor")[0], fresh[0])
