"""End-to-end PPO runs on CPU (``--plugins slime_grpo,slime_ppo``, estimator ``gae``).

A ~50k-parameter Qwen2 built from ``init_config`` generates for real with the local engine;
the reward is a test plugin (fraction of digits in the response) so returns vary per sample.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from slime_hookspecs import RewardFunctionRecord, hookimpl

CRITIC_KEYS = (
    "train/value_loss",
    "train/value_clipfrac",
    "train/critic_grad_norm",
    "train/explained_variance",
    "train/values_mean",
    "train/returns_mean",
)


def _digit_share(sample) -> float:
    text = sample.response or ""
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)


class DigitReward:
    """The share of digits in the response: a reward record the run's config names."""

    @hookimpl
    def slime_register_reward_functions(self):
        return [RewardFunctionRecord(name="digit_share", factory=lambda config: _digit_share)]

    @hookimpl
    def slime_configure(self, config):
        config.rollout.reward = "digit_share"


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _ckpt(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:06d}" / "trainer"


def _initial_actor(config: dict) -> dict[str, torch.Tensor]:
    from slime_core.models.loading import load_causal_lm
    from slime_core.testing import build_test_config

    cfg = build_test_config(model=config["model"])
    model = load_causal_lm(cfg.model, torch.device("cpu"), torch.float32, seed=cfg.run.seed)
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_ppo_run_trains_the_critic_and_the_actor(ppo_config, run_slime) -> None:
    ppo_config["run"]["num_rollouts"] = 5
    ppo_config["algorithm"].update(kl_in_reward_coef=0.05, kl_estimator="k1", lam=0.95)
    ppo_config["ppo"].update(critic_lr=3e-3)
    ppo_config["train"]["num_steps_per_rollout"] = 2
    run_dir = run_slime(ppo_config, [DigitReward()])
    metrics = read_metrics(run_dir)
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5]
    for m in metrics:
        for key in CRITIC_KEYS + ("train/kl_in_reward", "train/pg_loss"):
            assert key in m, (m["step"], key)
        assert m["train/critic_lr"] == 3e-3 and "train/actor_frozen" not in m
    # the critic learns: its value loss (on fresh rollouts each step) falls
    losses = [m["train/value_loss"] for m in metrics]
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(m["train/grad_norm"] > 0 for m in metrics)  # the actor trains from step 1
    # the critic is saved inside the trainer's checkpoint
    critic = _ckpt(run_dir, 5) / "critic"
    assert (critic / "critic.safetensors").is_file() and (critic / "critic_state.pt").is_file()


def test_critic_only_warm_up_keeps_the_actor_weights(ppo_config, run_slime) -> None:
    ppo_config["run"].update(num_rollouts=3, save_interval=1, keep_checkpoints=3)
    ppo_config["ppo"]["num_critic_only_steps"] = 2
    # a linear LR warm-up: the actor's first real step must start it from the beginning
    ppo_config["train"].update(warmup_steps=4, weight_decay=0.1)
    lrs: dict[int, float] = {}

    class LR:
        @hookimpl(trylast=True)  # after slime_ppo's rewind
        def slime_before_train_step(self, config, rollout_id, step_id, model, optimizer, scheduler):
            lrs[rollout_id] = optimizer.param_groups[0]["lr"]

    run_dir = run_slime(ppo_config, [DigitReward(), LR()])
    metrics = read_metrics(run_dir)
    assert [m.get("train/actor_frozen") for m in metrics] == [1.0, 1.0, None]
    assert [m["train/grad_norm"] for m in metrics][:2] == [0.0, 0.0]
    assert metrics[2]["train/grad_norm"] > 0 and "train/pg_loss" in metrics[2]
    assert all("train/value_loss" in m for m in metrics)  # the critic trains throughout

    init = _initial_actor(ppo_config)
    for step in (1, 2):  # bit-identical actor (no Adam moments, no weight decay)
        saved = load_file(str(_ckpt(run_dir, step) / "model.safetensors"))
        assert set(saved) == set(init) - {"lm_head.weight"}  # the tied head written once
        for k, v in saved.items():
            assert torch.equal(v, init[k]), (step, k)
    after = load_file(str(_ckpt(run_dir, 3) / "model.safetensors"))
    assert any(not torch.equal(v, init[k]) for k, v in after.items())
    c1 = load_file(str(_ckpt(run_dir, 1) / "critic" / "critic.safetensors"))
    c2 = load_file(str(_ckpt(run_dir, 2) / "critic" / "critic.safetensors"))
    assert any(not torch.equal(c1[k], c2[k]) for k in c1)
    # warm-up LR of the first actor step = the schedule's first value, 1e-3 * 1/4
    assert lrs[2] == pytest.approx(1e-3 / 4)


def test_resume_continues_with_identical_critic(ppo_config, run_slime, tmp_path: Path) -> None:
    ppo_config["run"].update(num_rollouts=4, save_interval=2)
    ppo_config["ppo"]["num_critic_only_steps"] = 1
    ppo_config["rollout"]["temperature"] = 1.0
    straight = run_slime(
        {**ppo_config, "run": {**ppo_config["run"], "run_dir": str(tmp_path / "a")}},
        [DigitReward()],
    )
    first = {
        **ppo_config,
        "run": {**ppo_config["run"], "run_dir": str(tmp_path / "b"), "num_rollouts": 2},
    }
    part = run_slime(first, [DigitReward()])
    run_slime(
        {**ppo_config, "run": {**ppo_config["run"], "run_dir": str(tmp_path / "b")}},
        [DigitReward()],
        resume=str(part),
    )
    a, b = read_metrics(straight), read_metrics(part)
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    for ma, mb in zip(a, b, strict=True):
        for key in CRITIC_KEYS + ("train/loss", "rollout/reward_mean"):
            assert ma[key] == pytest.approx(mb[key], rel=1e-5, abs=1e-6), (ma["step"], key)
    ca = load_file(str(_ckpt(straight, 4) / "critic" / "critic.safetensors"))
    cb = load_file(str(_ckpt(part, 4) / "critic" / "critic.safetensors"))
    for k in ca:
        torch.testing.assert_close(ca[k], cb[k], rtol=1e-5, atol=1e-6)


def test_a_grpo_run_with_slime_ppo_loaded_builds_no_critic(ppo_config, run_slime) -> None:
    from slime_ppo import glue

    ppo_config["algorithm"]["advantage_estimator"] = "grpo"
    ppo_config["run"]["num_rollouts"] = 1
    run_dir = run_slime(ppo_config, [DigitReward()])
    assert glue.STATE.critic is None
    assert "train/value_loss" not in read_metrics(run_dir)[0]
