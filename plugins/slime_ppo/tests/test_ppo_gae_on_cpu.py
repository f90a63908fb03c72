"""GAE and KL-in-reward against hand-derived values."""

import pytest
import torch
from slime_ppo.ops import gae_advantages_and_returns, kl_in_reward


def _t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def _close(a, b):
    torch.testing.assert_close(a, _t(*b), atol=1e-6, rtol=1e-5)


def test_gae_gamma_lambda_one_is_monte_carlo():
    # r = (0, 0, 1), V = (0.5, 0.6, 0.7): deltas = (0.6 - 0.5, 0.7 - 0.6, 1 - 0.7) = (0.1, 0.1, 0.3)
    # A = (0.5, 0.4, 0.3), returns = A + V = (1, 1, 1)
    adv, ret = gae_advantages_and_returns([_t(0, 0, 1)], [_t(0.5, 0.6, 0.7)], [_t(1, 1, 1)])
    _close(adv[0], [0.5, 0.4, 0.3])
    _close(ret[0], [1.0, 1.0, 1.0])


def test_gae_gamma_lambda():
    # gamma 0.9, lam 0.5 (gamma * lam = 0.45):
    # t2: delta = 1 - 0.7 = 0.3, A = 0.3
    # t1: delta = 0.9 * 0.7 - 0.6 = 0.03, A = 0.03 + 0.45 * 0.3 = 0.165
    # t0: delta = 0.9 * 0.6 - 0.5 = 0.04, A = 0.04 + 0.45 * 0.165 = 0.11425
    adv, ret = gae_advantages_and_returns(
        [_t(0, 0, 1)], [_t(0.5, 0.6, 0.7)], [_t(1, 1, 1)], gamma=0.9, lam=0.5
    )
    _close(adv[0], [0.11425, 0.165, 0.3])
    _close(ret[0], [0.61425, 0.765, 1.0])


def test_gae_skips_masked_tokens_without_breaking_the_chain():
    # mask (1, 0, 1): the masked position's reward 5 and value 9 are ignored and it is not a step
    # t2: delta = 1 - 0.7 = 0.3, A = 0.3
    # t0: delta = 0 + 0.9 * V_t2 - 0.5 = 0.13, A = 0.13 + 0.45 * 0.3 = 0.265
    # masked t1: A = 0, return = 0 + V = 9
    adv, ret = gae_advantages_and_returns(
        [_t(0, 5, 1)], [_t(0.5, 9, 0.7)], [_t(1, 0, 1)], gamma=0.9, lam=0.5
    )
    _close(adv[0], [0.265, 0.0, 0.3])
    _close(ret[0], [0.765, 9.0, 1.0])


def test_gae_batch_of_different_lengths_and_trailing_mask():
    # sample 0: one token, r = 1, V = 0.25 -> A = 0.75; sample 1: mask (1, 1, 0), r = (0, 2, 7), V = (1, 1, 3)
    # sample 1, gamma = lam = 1: t1: delta = 2 - 1 = 1 (the episode ends there), t0: delta = 0 + 1 - 1 = 0 -> A = 1
    adv, _ = gae_advantages_and_returns(
        [_t(1), _t(0, 2, 7)], [_t(0.25), _t(1, 1, 3)], [_t(1), _t(1, 1, 0)]
    )
    _close(adv[0], [0.75])
    _close(adv[1], [1.0, 1.0, 0.0])


def test_gae_shape_check():
    with pytest.raises(ValueError, match="sample 0"):
        gae_advantages_and_returns([_t(1, 2)], [_t(1)], [_t(1, 1)])


def test_kl_in_reward_last_model_token():
    # sample 0: mask (1, 1, 0), kl (0.1, 0.2, 0.3), kl_coef 0.1: (-0.01, -0.02 + 1, 0) -> reward on index 1
    # sample 1: mask (1, 1): (-0.05, -0.05 + 2)
    out = kl_in_reward(
        _t(1, 2), [_t(0.1, 0.2, 0.3), _t(0.5, 0.5)], [_t(1, 1, 0), _t(1, 1)], kl_coef=0.1
    )
    _close(out[0], [-0.01, 0.98, 0.0])
    _close(out[1], [-0.05, 1.95])


def test_kl_in_reward_then_gae_keeps_the_outcome_reward():
    # a response ending with a masked observation token still gets its reward into the advantages
    tok = kl_in_reward(_t(1), [_t(0, 0, 0)], [_t(1, 1, 0)], kl_coef=0.0)
    adv, _ = gae_advantages_and_returns(tok, [_t(0, 0, 0)], [_t(1, 1, 0)])
    _close(adv[0], [1.0, 1.0, 0.0])
