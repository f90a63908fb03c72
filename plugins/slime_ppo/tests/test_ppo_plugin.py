"""Registration, the [ppo] config section and its checks, and the torch-free entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _core(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "slime_core", *args], capture_output=True, text=True, check=True
    )
    return out.stdout


def test_plugins_info_lists_the_record_and_the_config_section() -> None:
    info = json.loads(_core("plugins", "info", "slime_ppo", "--json"))
    assert info["status"] == "active" and info["distribution"] == "slime-ppo"
    assert [r["name"] for r in info["records"]["advantage_estimator"]] == ["gae"]
    assert [s["name"] for s in info["config_sections"]] == ["ppo"]
    # gae is a record only: no second path through slime_compute_advantages
    assert "slime_compute_advantages" not in info["hooks"]
    for hook in (
        "slime_trainer_init",
        "slime_loss",
        "slime_before_train_step",
        "slime_trainer_save",
        "slime_trainer_load",
    ):
        assert hook in info["hooks"]


def test_record_flags(ppo_manager) -> None:
    rec = ppo_manager.registries.advantage_estimator.get("gae")
    assert rec.owner == "slime_ppo" and not rec.needs_ref


def test_entry_point_module_does_not_import_torch() -> None:
    code = (
        "import sys, slime_ppo.plugin, slime_ppo.config; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_defaults_and_values(make_config) -> None:
    cfg = make_config(ppo={"critic_lr": 2e-5, "num_critic_only_steps": 3})
    assert cfg.ppo.critic_lr == 2e-5 and cfg.ppo.num_critic_only_steps == 3
    # the slime numerics preset (the default): no whitening, no 0.5 on the value loss
    assert cfg.ppo.whiten_advantages is False and cfg.ppo.critic_init == "policy"
    assert cfg.ppo.value_clip == 0.2 and cfg.ppo.value_loss_coef == 1.0
    verl = make_config(algorithm={"numerics": "verl"})
    assert verl.ppo.whiten_advantages is True and verl.ppo.value_loss_coef == 0.5
    assert verl.ppo.value_clip == 0.5 and verl.ppo.value_clipfrac == "loss"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"critic_init": "copy"}, "ppo.critic_init: 'copy' is not one of policy, random"),
        ({"value_clip": -0.1}, "ppo.value_clip: must be >= 0"),
        ({"value_loss_coef": 0.0}, "ppo.value_loss_coef: must be > 0"),
        ({"critic_lr": -1.0}, "ppo.critic_lr: must be >= 0"),
        ({"num_critic_only_steps": -1}, "ppo.num_critic_only_steps: must be >= 0"),
        ({"critic_micro_batch_tokens": -5}, "ppo.critic_micro_batch_tokens: must be >= 0"),
        ({"critic_lrr": 1.0}, "did you mean 'ppo.critic_lr'"),
    ],
)
def test_bad_values_name_the_key(make_config, values, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_config(ppo=values)


def _configure(config) -> None:
    from slime_ppo.config import check_config

    check_config(config)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"ppo": {"num_critic_only_steps": 2}, "algorithm": {"advantage_estimator": "grpo"}},
            "ppo.num_critic_only_steps = 2 needs a critic",
        ),
    ],
)
def test_configure_rejects_what_the_critic_cannot_do(make_config, sections, message) -> None:
    with pytest.raises(ValueError, match=message):
        _configure(make_config(**sections))


def test_configure_accepts_a_plain_ppo_config(make_config) -> None:
    from slime_ppo.config import uses_critic

    ppo = make_config(algorithm={"kl_in_reward_coef": 0.01, "whiten_advantages": True})
    grpo = make_config(algorithm={"advantage_estimator": "grpo"})
    # the accepted critic run really is one, the other really is not (nothing to check there)
    assert uses_critic(ppo) and not uses_critic(grpo)
    for cfg in (ppo, grpo):
        before = cfg.to_dict()
        _configure(cfg)  # must not raise
        assert cfg.to_dict() == before  # and must not rewrite what it accepted


def test_tiny_arith_ppo_config_matches_grpo_but_for_the_estimator() -> None:
    """The learning comparison's fairness: same model, data, samples and actor optimiser."""
    from pathlib import Path

    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    root = Path(__file__).resolve().parents[3] / "examples" / "tiny_arith"
    sel = PluginSelection(plugins=["slime_grpo", "slime_ppo"])
    _, ppo = resolve(sel, root / "ppo.toml")
    _, grpo = resolve(sel, root / "grpo.toml")
    assert (
        ppo.algorithm.advantage_estimator == "gae" and grpo.algorithm.advantage_estimator == "grpo"
    )
    a, b = ppo.to_dict(), grpo.to_dict()
    a["run"].pop("name"), b["run"].pop("name")
    a["algorithm"].pop("advantage_estimator"), b["algorithm"].pop("advantage_estimator")
    for section in ("run", "model", "data", "rollout", "eval", "train", "algorithm"):
        assert a[section] == b[section], section
