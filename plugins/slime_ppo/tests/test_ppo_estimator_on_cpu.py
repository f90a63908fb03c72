"""The gae estimator on a TrainBatch: KL-in-reward token rewards, GAE, whitening, metrics.

Every expected number is worked out by hand in the comments.
"""

import math

import pytest
import torch
from slime_hookspecs import TrainBatch
from slime_ppo.estimator import gae_estimate, reward_kl


def _t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def _close(a, b, atol=1e-6):
    torch.testing.assert_close(a, _t(*b), atol=atol, rtol=1e-5)


@pytest.fixture
def make_config(make_config):
    """These cases derive the skip convention by hand: GAE over model tokens only, the KL on
    model tokens, whitened advantages (the verl preset's GAE, the default before the numerics
    presets). The slime preset's GAE is tested in test_ppo_numerics_on_cpu.py."""

    def make(**sections):
        alg = {"masked_steps": "skip", **sections.pop("algorithm", {})}
        ppo = {"kl_in_reward_masked": True, "whiten_advantages": True, **sections.pop("ppo", {})}
        return make_config(algorithm=alg, ppo=ppo, **sections)

    return make


def _batch(**kw):
    base = dict(
        tokens=[torch.arange(5)],
        response_lengths=[3],
        loss_masks=[_t(1, 0, 1)],
        rewards=[1.0],
        rollout_log_probs=[_t(-1.0, -2.0, -0.5)],
        ref_log_probs=[_t(-1.5, -1.0, -0.25)],
    )
    base.update(kw)
    return TrainBatch(**base)


def test_token_rewards_and_gae_with_kl_k1_by_hand(make_config, ppo_manager):
    cfg = make_config(
        algorithm={"kl_in_reward_coef": 0.1, "kl_estimator": "k1", "gamma": 0.9, "lam": 0.8},
        ppo={"whiten_advantages": False},
    )
    k1 = ppo_manager.registries.kl_estimator.get("k1").factory(cfg)  # slime_grpo's record
    batch = _batch()
    # k1 = rollout - ref = (-1 + 1.5, -2 + 1, -0.5 + 0.25) = (0.5, -1.0, -0.25)
    _close(reward_kl(cfg, batch, k1)[0], [0.5, -1.0, -0.25])
    # token rewards: -0.1 * kl * m, plus reward 1 on the last masked-in token (index 2):
    #   (-0.05, 0 (masked), 0.025 + 1) = (-0.05, 0, 1.025)
    # values (0.2, 9.0, 0.5); model tokens are positions 0 and 2 (position 1 is skipped):
    #   pos 2: delta = 1.025 - 0.5 = 0.525,               A = 0.525
    #   pos 0: delta = -0.05 + 0.9 * 0.5 - 0.2 = 0.2,     A = 0.2 + 0.9 * 0.8 * 0.525 = 0.578
    # returns = A + V = (0.778, 9.0, 1.025) (a masked position's return is its value)
    adv, ret, m = gae_estimate(cfg, batch, [_t(0.2, 9.0, 0.5)], k1)
    _close(adv[0], [0.578, 0.0, 0.525])
    _close(ret[0], [0.778, 9.0, 1.025])
    assert m["train/kl_in_reward"] == pytest.approx((0.5 - 0.25) / 2)
    assert m["train/values_mean"] == pytest.approx((0.2 + 0.5) / 2)
    assert m["train/returns_mean"] == pytest.approx((0.778 + 1.025) / 2)
    assert m["train/advantages_mean"] == pytest.approx((0.578 + 0.525) / 2)
    # explained variance over masked-in tokens: R = (0.778, 1.025), R - V = (0.578, 0.525)
    # Var(R) = (0.2470 / 2)^2 = 0.01525225, Var(R - V) = (0.053 / 2)^2 = 0.00070225
    assert m["train/explained_variance"] == pytest.approx(1 - 0.00070225 / 0.01525225, rel=1e-4)


def test_kl_uses_old_log_probs_when_the_trainer_computed_them(make_config, ppo_manager):
    cfg = make_config(algorithm={"kl_in_reward_coef": 1.0, "kl_estimator": "k1"})
    k1 = ppo_manager.registries.kl_estimator.get("k1").factory(cfg)
    batch = _batch(old_log_probs=[_t(-1.5, -1.0, -0.25)])  # equal to ref: KL 0
    _close(reward_kl(cfg, batch, k1)[0], [0.0, 0.0, 0.0])


def test_kl_k3_in_the_reward_by_hand(make_config, ppo_manager):
    cfg = make_config(
        algorithm={"kl_in_reward_coef": 0.5, "kl_estimator": "k3"}, ppo={"whiten_advantages": False}
    )
    k3 = ppo_manager.registries.kl_estimator.get("k3").factory(cfg)
    batch = _batch(loss_masks=[_t(1, 1, 1)], rewards=[0.0])
    # k3(k1) = exp(-k1) - 1 + k1 with k1 = (0.5, -1, -0.25):
    want = [math.exp(-0.5) - 0.5, math.exp(1.0) - 2.0, math.exp(0.25) - 1.25]
    _close(reward_kl(cfg, batch, k3)[0], want)
    # gamma = lam = 1, V = 0: A_t = sum_{k >= t} r_k with r = -0.5 * k3
    r = [-0.5 * w for w in want]
    adv, ret, _ = gae_estimate(cfg, batch, [_t(0, 0, 0)], k3)
    _close(adv[0], [r[0] + r[1] + r[2], r[1] + r[2], r[2]])
    _close(ret[0], [r[0] + r[1] + r[2], r[1] + r[2], r[2]])


def test_no_kl_term_when_the_coefficient_is_zero(make_config):
    cfg = make_config(ppo={"whiten_advantages": False})
    batch = _batch(ref_log_probs=None, rollout_log_probs=None)
    assert reward_kl(cfg, batch, None) is None
    # reward 1 on position 2 only; gamma = lam = 1, V = (0.25, -, 0.5): A = (0.75, 0, 0.5)
    adv, ret, m = gae_estimate(cfg, batch, [_t(0.25, 3.0, 0.5)])
    _close(adv[0], [0.75, 0.0, 0.5])
    _close(ret[0], [1.0, 3.0, 1.0])
    assert "train/kl_in_reward" not in m
    assert m["train/explained_variance"] == 0.0  # Var(R) = 0: defined as 0


def test_kl_in_reward_needs_ref_and_sampling_log_probs(make_config, ppo_manager):
    cfg = make_config(algorithm={"kl_in_reward_coef": 0.1})
    k3 = ppo_manager.registries.kl_estimator.get("k3").factory(cfg)
    with pytest.raises(ValueError, match="kl_in_reward_coef = 0.1 needs batch.ref_log_probs"):
        reward_kl(cfg, _batch(ref_log_probs=None), k3)
    with pytest.raises(ValueError, match="needs the sampling log-probs"):
        reward_kl(cfg, _batch(rollout_log_probs=None), k3)


def test_whitening_over_masked_tokens_of_the_whole_batch(make_config):
    cfg = make_config()  # whitened: this module's make_config sets ppo.whiten_advantages
    batch = TrainBatch(
        tokens=[torch.arange(4), torch.arange(4)],
        response_lengths=[2, 2],
        loss_masks=[_t(1, 1), _t(1, 0)],
        rewards=[1.0, 0.0],
    )
    # V = 0, gamma = lam = 1: A = (1, 1) and (0, 0-masked); masked-in values (1, 1, 0):
    # mean 2/3, Bessel var = (2 * (1/3)^2 + (2/3)^2) / 2 = 1/3, std = 0.57735
    adv, ret, _ = gae_estimate(cfg, batch, [_t(0, 0), _t(0, 0)])
    s = math.sqrt(1 / 3 + 1e-8)
    _close(adv[0], [(1 - 2 / 3) / s] * 2)
    _close(
        adv[1], [(0 - 2 / 3) / s] * 2
    )  # the masked position is transformed too (loss ignores it)
    _close(ret[0], [1.0, 1.0])  # returns stay unwhitened
    _close(ret[1], [0.0, 0.0])


def test_whitening_is_skipped_when_no_token_is_masked_in(make_config):
    cfg = make_config()
    batch = TrainBatch(
        tokens=[torch.arange(3)], response_lengths=[2], loss_masks=[_t(0, 0)], rewards=[1.0]
    )
    adv, _, _ = gae_estimate(cfg, batch, [_t(0.5, 0.5)])
    _close(adv[0], [0.0, 0.0])
