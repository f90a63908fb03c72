"""OPSM mask, entropy bonus and SFT loss against hand-derived values."""

import math

import torch
from slime_grpo.ops import entropy_bonus, entropy_from_logits, get_reducer, opsm_mask, sft_loss


def test_opsm_rule():
    lp = [torch.full((2,), -1.0), torch.full((2,), -1.0), torch.full((2,), -1.0), torch.zeros(3)]
    old = [
        torch.full((2,), -0.5),  # old - new = 0.5 per token -> seq_kl 0.5 > 0.15
        torch.full((2,), -0.5),  # same drift, positive advantage
        torch.full((2,), -1.0),  # no drift
        torch.tensor(
            [0.3, -0.1, 5.0]
        ),  # masked-in mean (0.3 - 0.1) / 2 = 0.1 <= 0.15 (with the masked 5: 1.73)
    ]
    adv = [-torch.ones(2), torch.ones(2), -torch.ones(2), -torch.ones(3)]
    masks = [torch.ones(2), torch.ones(2), torch.ones(2), torch.tensor([1.0, 1.0, 0.0])]
    keep, metrics = opsm_mask(lp, old, adv, masks, opsm_delta=0.15)
    assert [k.tolist() for k in keep] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0, 1.0]]
    # 2 of the 8 loss-masked tokens dropped
    torch.testing.assert_close(metrics["opsm_clipfrac"], torch.tensor(0.25))


def test_opsm_is_strict_and_gradient_free():
    lp = [torch.tensor([-1.0], requires_grad=True)]
    keep, _ = opsm_mask(
        lp, [torch.tensor([-1.0])], [-torch.ones(1)], [torch.ones(1)], opsm_delta=0.0
    )
    # seq_kl 0 is not > 0 -> kept
    assert keep[0].tolist() == [1.0] and not keep[0].requires_grad


def test_entropy_from_logits():
    # uniform over 2: ln 2; probs (0.25, 0.75): -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.5623351
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])
    h = entropy_from_logits(logits)
    torch.testing.assert_close(
        h, torch.tensor([math.log(2.0), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))])
    )


def test_entropy_bonus_sign_and_reducer():
    h = [torch.tensor([0.6, 0.2]), torch.tensor([0.4])]
    reducer = get_reducer("token_mean", [2, 1], [torch.ones(2), torch.ones(1)])
    # -0.01 * (0.6 + 0.2 + 0.4) / 3 = -0.004
    torch.testing.assert_close(entropy_bonus(h, reducer, 0.01), torch.tensor(-0.004))


def test_sft_loss_default_and_token_mean():
    lp = [
        torch.tensor([-1.0, -2.0, -3.0], requires_grad=True),
        torch.tensor([-4.0], requires_grad=True),
    ]
    masks = [torch.tensor([1, 1, 0]), torch.tensor([0])]
    # default seq_mean_token_mean: ((1 + 2) / 2 + 0) / 2 = 0.75 (the fully masked sample counts)
    loss = sft_loss(lp, masks)
    torch.testing.assert_close(loss.detach(), torch.tensor(0.75))
    loss.backward()
    # d/d logp = -m / n_i / N = (-1/4, -1/4, 0) | (0,)
    torch.testing.assert_close(lp[0].grad, torch.tensor([-0.25, -0.25, 0.0]))
    # token mean: (1 + 2) / 2 = 1.5
    reducer = get_reducer("token_mean", [3, 1], masks)
    torch.testing.assert_close(sft_loss(lp, masks, reducer=reducer).detach(), torch.tensor(1.5))
