"""PPO clip, GSPO and CISPO losses against hand-derived values, including gradients."""

import math

import pytest
import torch
from slime_grpo.ops import POLICY_LOSSES, cispo_loss, get_reducer, gspo_loss, ppo_clip_loss

LN = math.log


def _batch(ratios, advantages, masks):
    """Per-sample (log_probs with grad, old_log_probs, advantages, masks) giving the wanted ratios."""
    log_probs, old = [], []
    for rs in ratios:
        lp = torch.full((len(rs),), -1.0, requires_grad=True)
        log_probs.append(lp)
        old.append(lp.detach() - torch.tensor([LN(r) for r in rs]))
    adv = [torch.tensor(a, dtype=torch.float32) for a in advantages]
    m = [torch.tensor(x, dtype=torch.float32) for x in masks]
    return log_probs, old, adv, m


# sample 0: (A=+1, r=1.5) clipped high | (A=+1, r=0.5) not clipped | (A=-1, r=0.5) clipped low | (A=-1, r=1.5)
# sample 1: (A=+1, r=1.1) | (A=+1, r=1.5) but loss-masked | (A=-1, r=4.0) dual-clip case | (A=+1, r=1.25)
RATIOS = [[1.5, 0.5, 0.5, 1.5], [1.1, 1.5, 4.0, 1.25]]
ADVS = [[1.0, 1.0, -1.0, -1.0], [1.0, 1.0, -1.0, 1.0]]
MASKS = [[1, 1, 1, 1], [1, 0, 1, 1]]


def test_ppo_clip_higher_both_sides():
    lp, old, adv, m = _batch(RATIOS, ADVS, MASKS)
    loss, metrics = ppo_clip_loss(lp, old, adv, m, eps_clip=0.2, eps_clip_high=0.28)
    # clip range [0.8, 1.28]; L = max(-A r, -A clip(r)):
    # s0: max(-1.5, -1.28) = -1.28 | max(-0.5, -0.8) = -0.5 | max(0.5, 0.8) = 0.8 | max(1.5, 1.28) = 1.5
    # s1: -1.1 | max(-1.5, -1.28) = -1.28 | max(4.0, 1.28) = 4.0 | 1.25 < 1.28 -> -1.25 (eps 0.2 would clip)
    torch.testing.assert_close(loss[0].detach(), torch.tensor([-1.28, -0.5, 0.8, 1.5]))
    torch.testing.assert_close(loss[1].detach(), torch.tensor([-1.1, -1.28, 4.0, -1.25]))
    # 7 loss-masked tokens; clipped: s0 t0 (high), s0 t2 (low); s1 t1 is clipped but masked out
    torch.testing.assert_close(metrics["pg_clipfrac"], torch.tensor(2 / 7))
    torch.testing.assert_close(metrics["pg_clipfrac_high"], torch.tensor(1 / 7))
    torch.testing.assert_close(metrics["pg_clipfrac_low"], torch.tensor(1 / 7))
    torch.testing.assert_close(metrics["pg_clipfrac_dual"], torch.tensor(0.0))
    # ppo_kl = mean(old - new) = -mean(ln r) over masked tokens
    kl = -(2 * LN(1.5) + 2 * LN(0.5) + LN(1.1) + LN(4.0) + LN(1.25)) / 7
    torch.testing.assert_close(metrics["ppo_kl"], torch.tensor(kl))


def test_ppo_gradient_is_zero_where_clipped():
    lp, old, adv, m = _batch(RATIOS, ADVS, MASKS)
    loss, _ = ppo_clip_loss(lp, old, adv, m, eps_clip=0.2, eps_clip_high=0.28)
    loss[0].sum().backward()
    # d(-A r)/d logp = -A r where unclipped: (clipped, -0.5, clipped, +1.5)
    torch.testing.assert_close(lp[0].grad, torch.tensor([0.0, -0.5, 0.0, 1.5]))


def test_ppo_symmetric_default_and_dual_clip():
    lp, old, adv, m = _batch(RATIOS, ADVS, MASKS)
    loss, metrics = ppo_clip_loss(lp, old, adv, m, eps_clip=0.2, eps_clip_c=3.0)
    # eps_clip_high defaults to 0.2: (A=+1, r=1.25) -> -1.2; dual clip: A=-1, r=4 -> min(4.0, -A*3) = 3.0
    torch.testing.assert_close(loss[1].detach(), torch.tensor([-1.1, -1.2, 3.0, -1.2]))
    torch.testing.assert_close(metrics["pg_clipfrac_dual"], torch.tensor(1 / 7))
    # clipped: s0 t0, s0 t2, s1 t3 -> 3 / 7
    torch.testing.assert_close(metrics["pg_clipfrac"], torch.tensor(3 / 7))
    loss[1].sum().backward()
    # dual-clipped token has no gradient; s1 t0 unclipped: -A r = -1.1; s1 t1 and t3 clipped
    torch.testing.assert_close(lp[1].grad, torch.tensor([-1.1, 0.0, 0.0, 0.0]))


def test_dual_clip_needs_c_above_one():
    lp, old, adv, m = _batch(RATIOS, ADVS, MASKS)
    with pytest.raises(ValueError, match="> 1.0"):
        ppo_clip_loss(lp, old, adv, m, eps_clip_c=1.0)


def test_metric_reducer_is_used():
    lp, old, adv, m = _batch(RATIOS, ADVS, MASKS)
    reducer = get_reducer("seq_mean_token_mean", [4, 4], m)
    _, metrics = ppo_clip_loss(
        lp, old, adv, m, eps_clip=0.2, eps_clip_high=0.28, metric_reducer=reducer
    )
    # per-sample clipfrac: s0 2/4, s1 0/3 -> (0.5 + 0) / 2 = 0.25
    torch.testing.assert_close(metrics["pg_clipfrac"], torch.tensor(0.25))


def test_gspo_sequence_ratio_uses_masked_tokens_only():
    # log-ratios (0.2, -0.1, 5.0 masked): log s = (0.2 - 0.1) / 2 = 0.05, s = 1.0512711 (unclipped, eps 0.2)
    lp = torch.full((3,), -1.0, requires_grad=True)
    old = lp.detach() - torch.tensor([0.2, -0.1, 5.0])
    adv, mask = [torch.ones(3)], [torch.tensor([1.0, 1.0, 0.0])]
    s = math.exp(0.05)
    loss, metrics = gspo_loss([lp], [old], adv, mask, eps_clip=0.2)
    torch.testing.assert_close(loss[0].detach(), torch.tensor([-s, -s, -s]))
    assert metrics["pg_clipfrac"].item() == 0.0
    torch.testing.assert_close(metrics["ppo_kl"], torch.tensor(-0.05))
    # sequence form: d s / d logp_t = s * m_t / 2 -> grad of token 0's loss spreads over both masked-in tokens
    loss[0][0].backward()
    torch.testing.assert_close(lp.grad, torch.tensor([-s / 2, -s / 2, 0.0]))


def test_gspo_token_level_form_same_value_local_gradient():
    lp = torch.full((3,), -1.0, requires_grad=True)
    old = lp.detach() - torch.tensor([0.2, -0.1, 5.0])
    adv, mask = [torch.ones(3)], [torch.tensor([1.0, 1.0, 0.0])]
    s = math.exp(0.05)
    loss, _ = gspo_loss([lp], [old], adv, mask, eps_clip=0.2, token_level=True)
    torch.testing.assert_close(loss[0].detach(), torch.tensor([-s, -s, -s]))
    # s_it = sg[s] * pi_t / sg[pi_t]: gradient of token 0's loss is -s on token 0 only
    loss[0][0].backward()
    torch.testing.assert_close(lp.grad, torch.tensor([-s, 0.0, 0.0]))
    # after the per-sequence token mean both forms give the same gradient: -s/2 on masked-in tokens
    for token_level in (False, True):
        lp2 = torch.full((3,), -1.0, requires_grad=True)
        out, _ = gspo_loss([lp2], [old], adv, mask, eps_clip=0.2, token_level=token_level)
        get_reducer("seq_mean_token_mean", [3], mask)(out).backward()
        torch.testing.assert_close(lp2.grad, torch.tensor([-s / 2, -s / 2, 0.0]))


def test_gspo_clips_whole_sequences_on_both_sides():
    # s0: log-ratios (0.5, 0.5) -> s = e^0.5 = 1.6487, A = +1 -> clipped to 1.2: loss -1.2, no gradient
    # s1: log-ratios (-0.5, -0.5) -> s = 0.6065, A = -1 -> clipped to 0.8: loss +0.8
    lp = [torch.full((2,), -1.0, requires_grad=True) for _ in range(2)]
    old = [lp[0].detach() - 0.5, lp[1].detach() + 0.5]
    adv = [torch.ones(2), -torch.ones(2)]
    mask = [torch.ones(2), torch.ones(2)]
    loss, metrics = gspo_loss(lp, old, adv, mask, eps_clip=0.2)
    torch.testing.assert_close(loss[0].detach(), torch.tensor([-1.2, -1.2]))
    torch.testing.assert_close(loss[1].detach(), torch.tensor([0.8, 0.8]))
    torch.testing.assert_close(metrics["pg_clipfrac"], torch.tensor(1.0))
    torch.testing.assert_close(metrics["pg_clipfrac_high"], torch.tensor(0.5))
    torch.testing.assert_close(metrics["pg_clipfrac_low"], torch.tensor(0.5))
    (loss[0].sum() + loss[1].sum()).backward()
    assert lp[0].grad.abs().sum().item() == 0.0 and lp[1].grad.abs().sum().item() == 0.0


def test_cispo_stop_gradient_weight():
    # ratios (1.5, 0.5, 1.1), A = (1, 1, -1), logp = (-0.5, -1.0, -2.0), eps_high 0.2, no lower bound
    # w = sg(min(r, 1.2)) = (1.2, 0.5, 1.1); L = -w A logp = (0.6, 0.5, -2.2)
    lp = torch.tensor([-0.5, -1.0, -2.0], requires_grad=True)
    old = lp.detach() - torch.tensor([LN(1.5), LN(0.5), LN(1.1)])
    adv, mask = [torch.tensor([1.0, 1.0, -1.0])], [torch.ones(3)]
    loss, metrics = cispo_loss([lp], [old], adv, mask, eps_clip_high=0.2)
    torch.testing.assert_close(loss[0].detach(), torch.tensor([0.6, 0.5, -2.2]))
    torch.testing.assert_close(metrics["pg_clipfrac"], torch.tensor(1 / 3))
    loss[0].sum().backward()
    # gradient = -w A (the weight is a constant): the clipped token still gets -1.2;
    # with a differentiable weight token 1 would get -A r (1 + logp) = 0 instead of -0.5
    torch.testing.assert_close(lp.grad, torch.tensor([-1.2, -0.5, 1.1]))


def test_cispo_optional_lower_bound():
    # eps_clip = 0.2 (slime passes --eps-clip): w = (1.2, 0.8, 1.1) -> L = (0.6, 0.8, -2.2), 2 of 3 clipped
    lp = torch.tensor([-0.5, -1.0, -2.0], requires_grad=True)
    old = lp.detach() - torch.tensor([LN(1.5), LN(0.5), LN(1.1)])
    loss, metrics = cispo_loss(
        [lp],
        [old],
        [torch.tensor([1.0, 1.0, -1.0])],
        [torch.ones(3)],
        eps_clip_high=0.2,
        eps_clip=0.2,
    )
    torch.testing.assert_close(loss[0].detach(), torch.tensor([0.6, 0.8, -2.2]))
    torch.testing.assert_close(metrics["pg_clipfrac"], torch.tensor(2 / 3))
    torch.testing.assert_close(metrics["pg_clipfrac_low"], torch.tensor(1 / 3))


def test_length_mismatch_fails_and_registry():
    lp, old, adv, m = _batch(RATIOS, ADVS, MASKS)
    with pytest.raises(ValueError, match="lengths differ"):
        ppo_clip_loss(lp, old, adv, [m[0], m[1][:2]])
    assert set(POLICY_LOSSES) == {"ppo", "gspo", "cispo"}
