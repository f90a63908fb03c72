"""Advantage estimators against hand-derived values."""

import math

import pytest
import torch
from slime_grpo.ops import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo_advantages,
    group_normalized_rewards,
    grpo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    rloo_advantages,
)


def _t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def _assert_list(actual, expected, tol=1e-5):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, torch.tensor(e, dtype=a.dtype), atol=tol, rtol=tol)


def test_grpo_unbiased_std_and_broadcast():
    # rewards [1,0,0,1] in one group of 4: mean 0.5, deviations +-0.5,
    # unbiased var = 4 * 0.25 / (4 - 1) = 1/3, std = 0.5773503 (biased std would be 0.5 -> A = 1)
    # A = +-0.5 / (0.5773503 + 1e-6) = +-0.8660239
    adv = grpo_advantages(_t(1, 0, 0, 1), [2, 1, 1, 3], n_samples_per_prompt=4)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    _assert_list(adv, [[a, a], [-a], [-a], [a, a, a]])


def test_grpo_groups_of_two():
    # groups (1,0) and (0,1): mean 0.5, unbiased std sqrt(0.5 / 1) = 0.7071068 -> A = +-0.7071058
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    adv = grpo_advantages(_t(1, 0, 0, 1), [1, 1, 1, 1], n_samples_per_prompt=2)
    _assert_list(adv, [[a], [-a], [-a], [a]])


def test_grpo_constant_group_is_zero_and_singleton_is_zero():
    # group [1,1]: std 0 -> 0 / (0 + 1e-6) = 0; n = 1: no std division, A = r - r = 0, no nan
    torch.testing.assert_close(group_normalized_rewards(_t(1, 1), n_samples_per_prompt=2), _t(0, 0))
    out = group_normalized_rewards(_t(3, -2), n_samples_per_prompt=1)
    torch.testing.assert_close(out, _t(0, 0))
    assert not torch.isnan(out).any()


def test_grpo_explicit_group_ids_with_uneven_groups():
    # group 9 = rewards (0, 1, 2): mean 1, unbiased std sqrt((1 + 0 + 1) / 2) = 1 -> A = (-1, 0, 1) / (1 + 1e-6)
    # group 4 = reward (5,), a singleton -> 0
    s = 1 / (1 + 1e-6)
    out = group_normalized_rewards(_t(0, 1, 2, 5), group_ids=[9, 9, 9, 4])
    torch.testing.assert_close(out, _t(-s, 0, s, 0))


def test_grpo_without_std_normalization_and_dr_grpo():
    # normalize_std=False: A = r - mean = (0.5, -0.5, -0.5, 0.5)
    out = group_normalized_rewards(_t(1, 0, 0, 1), n_samples_per_prompt=4, normalize_std=False)
    torch.testing.assert_close(out, _t(0.5, -0.5, -0.5, 0.5))
    # dr_grpo, groups (2,0) and (1,1): means 1 and 1 -> (1, -1, 0, 0)
    _assert_list(
        dr_grpo_advantages(_t(2, 0, 1, 1), [2, 1, 1, 1], n_samples_per_prompt=2),
        [[1, 1], [-1], [0], [0]],
    )


def test_grpo_bad_group_size_fails():
    with pytest.raises(ValueError, match="n_samples_per_prompt"):
        grpo_advantages(_t(1, 0, 0), [1, 1, 1], n_samples_per_prompt=2)
    with pytest.raises(ValueError, match="group_ids"):
        grpo_advantages(_t(1, 0), [1, 1])


def test_rloo_leave_one_out():
    # r = (1, 0, 0, 0), one group: A_0 = 1 - mean(0,0,0) = 1, A_j = 0 - mean(1,0,0) = -1/3
    _assert_list(
        rloo_advantages(_t(1, 0, 0, 0), [1, 2, 1, 1], n_samples_per_prompt=4),
        [[1], [-1 / 3] * 2, [-1 / 3], [-1 / 3]],
    )
    # singleton groups: no other sample -> 0
    _assert_list(rloo_advantages(_t(4, 7), [1, 1], n_samples_per_prompt=1), [[0], [0]])


def test_reinforce_plus_plus_skips_masked_tokens_in_discounting():
    # sample 0: mask [1,1,0,1], reward 1 on the last masked-in token (index 3), gamma 0.5,
    # discount steps count masked-in tokens only: G3 = 1, G1 = 0.5, G0 = 0.25, G2 (masked) = 0
    # sample 1: reward 0 -> returns 0
    masks = [_t(1, 1, 0, 1), _t(1, 1)]
    raw = reinforce_plus_plus_advantages(_t(1, 0), masks, gamma=0.5, whiten_advantages=False)
    _assert_list(raw, [[0.25, 0.5, 0, 1], [0, 0]])
    # whitening over the 5 masked-in values (0.25, 0.5, 1, 0, 0): mean 0.35,
    # unbiased var = (0.01 + 0.0225 + 0.4225 + 0.1225 + 0.1225) / 4 = 0.175, std 0.4183300
    adv = reinforce_plus_plus_advantages(_t(1, 0), masks, gamma=0.5)
    sd = math.sqrt(0.175 + 1e-8)
    _assert_list(adv, [[-0.1 / sd, 0.15 / sd, 0.0, 0.65 / sd], [-0.35 / sd, -0.35 / sd]])


def test_reinforce_plus_plus_kl_in_reward():
    # mask [1,0,1], kl (0.1, 0.2, 0.3), kl_coef 0.5: token rewards (-0.05, 0 [masked], -0.15 + 1 = 0.85)
    # gamma 1: G = (0.8, 0, 0.85); gamma 0.5: G0 = -0.05 + 0.5 * 0.85 = 0.375 (masked token is not a step)
    kl = [_t(0.1, 0.2, 0.3)]
    g1 = reinforce_plus_plus_advantages(
        _t(1), [_t(1, 0, 1)], kl=kl, kl_coef=0.5, whiten_advantages=False
    )
    _assert_list(g1, [[0.8, 0.0, 0.85]])
    g2 = reinforce_plus_plus_advantages(
        _t(1), [_t(1, 0, 1)], kl=kl, kl_coef=0.5, gamma=0.5, whiten_advantages=False
    )
    _assert_list(g2, [[0.375, 0.0, 0.85]])


def test_reinforce_plus_plus_fully_masked_sample_gets_zero():
    out = reinforce_plus_plus_advantages(_t(1, 1), [_t(0, 0), _t(1, 1)], whiten_advantages=False)
    _assert_list(out, [[0, 0], [1, 1]])


def test_reinforce_plus_plus_baseline():
    # rewards (1,0,0,1), one group: b = r - 0.5 = (0.5,-0.5,-0.5,0.5), one token each
    masks = [_t(1)] * 4
    raw = reinforce_plus_plus_baseline_advantages(
        _t(1, 0, 0, 1), masks, n_samples_per_prompt=4, whiten_advantages=False
    )
    _assert_list(raw, [[0.5], [-0.5], [-0.5], [0.5]])
    # whitened: mean 0, unbiased var 1/3 -> +-0.5 / sqrt(1/3) = +-0.8660254
    w = reinforce_plus_plus_baseline_advantages(_t(1, 0, 0, 1), masks, n_samples_per_prompt=4)
    a = 0.5 / math.sqrt(1 / 3 + 1e-8)
    _assert_list(w, [[a], [-a], [-a], [a]])


def test_reinforce_plus_plus_baseline_kl_forms():
    # rewards (1, 0), n = 2 -> b = (0.5, -0.5); kl sample 0 = (0.2, 0.4), kl_coef 1
    # cumulative: token rewards (-0.2, -0.4 + 0.5) -> returns (-0.1, 0.1); sample 1: (0, -0.5) -> (-0.5, -0.5)
    # per-token (slime): (0.5 - 0.2, 0.5 - 0.4) = (0.3, 0.1); sample 1: (-0.5, -0.5)
    masks = [_t(1, 1), _t(1, 1)]
    kl = [_t(0.2, 0.4), _t(0, 0)]
    kw = dict(n_samples_per_prompt=2, kl=kl, kl_coef=1.0, whiten_advantages=False)
    _assert_list(
        reinforce_plus_plus_baseline_advantages(_t(1, 0), masks, **kw), [[-0.1, 0.1], [-0.5, -0.5]]
    )
    _assert_list(
        reinforce_plus_plus_baseline_advantages(_t(1, 0), masks, cumulative_kl=False, **kw),
        [[0.3, 0.1], [-0.5, -0.5]],
    )


def test_advantages_carry_no_gradient():
    r = _t(1, 0).requires_grad_()
    adv = grpo_advantages(r, [1, 1], n_samples_per_prompt=2)
    assert not adv[0].requires_grad


def test_registry_names():
    assert set(ADVANTAGE_ESTIMATORS) == {
        "grpo",
        "dr_grpo",
        "gspo",
        "cispo",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
    }
    assert ADVANTAGE_ESTIMATORS["gspo"] is grpo_advantages


def test_whiten_epsilon_on_variance_and_unbiased():
    # (0, 1e-4): mean 5e-5, unbiased var 2 * (5e-5)^2 / 1 = 5e-9 -> 5e-5 / sqrt(5e-9 + 1e-8) = 0.4082483
    # (eps on the std would give 0.7070; a biased var 2.5e-9 would give 0.4472)
    from slime_grpo.ops import whiten

    e = 5e-5 / math.sqrt(5e-9 + 1e-8)
    torch.testing.assert_close(whiten(_t(0.0, 1e-4), _t(1, 1)), _t(-e, e), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="selects no token"):
        whiten(_t(1, 2), _t(0, 0))
