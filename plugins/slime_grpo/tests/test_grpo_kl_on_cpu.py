"""KL estimators against hand-derived values."""

import math

import pytest
import torch
from slime_grpo.ops import KL_ESTIMATORS, compute_approx_kl, compute_approx_kl_per_sample, kl_k3

LP = torch.tensor([-1.0, -2.0, -0.5])
REF = torch.tensor([-1.5, -1.0, -0.5])
# k1 = log p - log p_ref = (0.5, -1.0, 0.0)


def test_k1_k2():
    torch.testing.assert_close(compute_approx_kl(LP, REF, "k1"), torch.tensor([0.5, -1.0, 0.0]))
    # k2 = k1^2 / 2 = (0.125, 0.5, 0)
    torch.testing.assert_close(compute_approx_kl(LP, REF, "k2"), torch.tensor([0.125, 0.5, 0.0]))


def test_k3_low_var_kl():
    # k3 = exp(-k1) - 1 + k1: exp(-0.5) - 0.5 = 0.1065307, exp(1) - 2 = 0.7182818, 0
    expected = torch.tensor([math.exp(-0.5) - 0.5, math.e - 2.0, 0.0])
    torch.testing.assert_close(compute_approx_kl(LP, REF, "k3"), expected)
    torch.testing.assert_close(compute_approx_kl(LP, REF, "low_var_kl"), expected)
    assert KL_ESTIMATORS["low_var_kl"] is KL_ESTIMATORS["k3"]


def test_k3_clamp_and_its_gradient():
    # k1 = -3: exp(3) - 1 - 3 = 16.0855 -> clamped to 10; k1 = 12: e^-12 + 11 -> 10; k1 = 0.5 unclamped
    lp = torch.tensor([-3.0, 12.0, 0.5], requires_grad=True)
    kl = kl_k3(lp, torch.zeros(3))
    torch.testing.assert_close(kl.detach(), torch.tensor([10.0, 10.0, math.exp(-0.5) - 0.5]))
    kl.sum().backward()
    # d k3 / d k1 = 1 - exp(-k1): 0 where clamped, 1 - exp(-0.5) = 0.3934693 otherwise
    torch.testing.assert_close(lp.grad, torch.tensor([0.0, 0.0, 1 - math.exp(-0.5)]))


def test_importance_ratio_multiplies_before_the_clamp():
    # k1 = -3 -> k3 = 16.0855; ratio 0.5 -> 8.0428 (clamping first would give 5.0)
    lp, ref = torch.tensor([-3.0]), torch.tensor([0.0])
    out = compute_approx_kl(lp, ref, "k3", importance_ratio=torch.tensor([0.5]))
    torch.testing.assert_close(out, torch.tensor([0.5 * (math.exp(3) - 4)]))
    # k1 times ratio: (0.5, -1, 0) * (2, 1, 1) = (1, -1, 0)
    torch.testing.assert_close(
        compute_approx_kl(LP, REF, "k1", importance_ratio=torch.tensor([2.0, 1.0, 1.0])),
        torch.tensor([1.0, -1.0, 0.0]),
    )


def test_k1_gradient_flows_to_policy():
    lp = LP.clone().requires_grad_()
    compute_approx_kl(lp, REF, "k2").sum().backward()
    # d (k1^2 / 2) / d lp = k1
    torch.testing.assert_close(lp.grad, torch.tensor([0.5, -1.0, 0.0]))


def test_per_sample_and_unknown_name():
    out = compute_approx_kl_per_sample([LP[:2], LP[2:]], [REF[:2], REF[2:]], "k1")
    torch.testing.assert_close(torch.cat(out), torch.tensor([0.5, -1.0, 0.0]))
    with pytest.raises(ValueError, match="choose one of: k1, k2, k3, low_var_kl"):
        compute_approx_kl(LP, REF, "k4")
