"""PPO (slime_ppo's critic, gae) with the megatron backend as the actor: one step from the same
state equals the torch backend's, actor and critic metrics alike.

The critic is slime_ppo's own Hugging Face value model on each rank (built through
``slime_trainer_init``, which gets the Megatron model list); it is not a Megatron model (see
the plugin README).
"""

from __future__ import annotations

import pytest
from mg_support import base_data, grpo_batch, make_config


def test_ppo_step_matches_torch_backend() -> None:
    from megatron_backend.trainer import MegatronTrainer
    from slime_core.trainer.torch_trainer import TorchTrainer

    metrics = {}
    for backend in ("torch", "megatron"):
        cfg = make_config(base_data(algorithm={"advantage_estimator": "gae"},
                                    ppo={"critic_lr": 1e-3}), plugins=("slime_ppo",))
        trainer = TorchTrainer(cfg) if backend == "torch" else MegatronTrainer(cfg)
        metrics[backend] = trainer.train_step(grpo_batch(260), 0)
    t, m = metrics["torch"], metrics["megatron"]
    for key in ("train/loss", "train/grad_norm", "train/value_loss", "train/critic_grad_norm",
                "train/values_mean", "train/returns_mean"):
        assert key in m, key
        assert m[key] == pytest.approx(t[key], abs=1e-4), key
