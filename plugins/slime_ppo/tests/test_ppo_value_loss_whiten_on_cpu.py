"""Value loss and whitening against hand-derived values (the reducers are the
``algorithm.loss_reducer`` records, tested where they are defined: slime_grpo)."""

import math

import pytest
import torch
from slime_ppo.ops import value_loss, whiten


def _t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def _token_mean(masks):
    """A token-mean reducer over packed inputs, as the loss-reducer records build."""
    m = torch.cat(masks)
    return lambda x: (x * m).sum() / m.sum().clamp_min(1.0)


def test_value_loss_clipped_max_and_half():
    # value_clip 0.2, per token (v, v_old, R):
    # t0 (1.0, 1.5, 2.0): v_clip 1.3; max((1-2)^2, (1.3-2)^2) = max(1, 0.49) = 1 -> 0.5
    # t1 (2.0, 1.5, 0.0): v_clip 1.7; max(4, 2.89) = 4 -> 2.0
    # t2 (1.6, 1.5, 3.0): inside the band; (1.6-3)^2 = 1.96 -> 0.98
    # t3 masked out. token_mean = (0.5 + 2.0 + 0.98) / 3 = 1.16; clipfrac: |v - v_old| > 0.2 on t0, t1 -> 2/3
    v = _t(1.0, 2.0, 1.6, 8.0).requires_grad_()
    masks = [_t(1, 1, 1, 0)]
    reducer = _token_mean(masks)
    loss, metrics = value_loss(
        [v], [_t(1.5, 1.5, 1.5, 0.0)], [_t(2.0, 0.0, 3.0, 0.0)], masks, reducer=reducer
    )
    torch.testing.assert_close(loss.detach(), torch.tensor(1.16))
    torch.testing.assert_close(metrics["value_clipfrac"], torch.tensor(2 / 3))
    loss.backward()
    # unclipped branch everywhere: d/dv 0.5 (v - R)^2 = v - R, / 3 tokens -> (-1/3, 2/3, -1.4/3, 0)
    torch.testing.assert_close(v.grad, _t(-1 / 3, 2 / 3, -1.4 / 3, 0.0))


def test_value_loss_clipped_branch_has_no_gradient():
    # (v, v_old, R) = (1.0, 1.5, 0.0): unclipped 1.0, clipped (1.3)^2 = 1.69 -> 0.5 * 1.69 = 0.845, grad 0
    v = _t(1.0).requires_grad_()
    loss, _ = value_loss([v], [_t(1.5)], [_t(0.0)], [_t(1)], reducer=_token_mean([_t(1)]))
    torch.testing.assert_close(loss.detach(), torch.tensor(0.845))
    loss.backward()
    assert v.grad.item() == 0.0


def test_value_loss_options():
    v, old, ret, m = [_t(1.0, 2.0)], [_t(1.5, 1.5)], [_t(2.0, 0.0)], [_t(1, 1)]
    red = _token_mean(m)
    # no clip: 0.5 * ((1-2)^2 + (2-0)^2) / 2 (token mean of one sample) = 1.25; slime's coef 1.0 -> 2.5
    loss, metrics = value_loss(v, old, ret, m, value_clip=None, reducer=red)
    torch.testing.assert_close(loss, torch.tensor(1.25))
    torch.testing.assert_close(metrics["value_clipfrac"], torch.tensor(0.0))
    torch.testing.assert_close(
        value_loss(v, old, ret, m, value_clip=None, coef=1.0, reducer=red)[0], torch.tensor(2.5)
    )
    with pytest.raises(ValueError, match="returns lengths"):
        value_loss(v, old, [_t(1.0)], m, reducer=red)


def test_whiten_unbiased_and_shift_mean():
    # masked-in (2, 4, 6): mean 4, unbiased var (4 + 0 + 4) / 2 = 4, std 2; the masked 8 is transformed too
    x, m = _t(2, 4, 6, 8), _t(1, 1, 1, 0)
    torch.testing.assert_close(whiten(x, m), _t(-1, 0, 1, 2))
    # shift_mean=False adds the mean back: (3, 4, 5, 6)
    torch.testing.assert_close(whiten(x, m, shift_mean=False), _t(3, 4, 5, 6))


def test_whiten_epsilon_is_on_the_variance():
    # (0, 1e-4): mean 5e-5, unbiased var = 2 * (5e-5)^2 = 5e-9; 5e-5 / sqrt(5e-9 + 1e-8) = 0.4082483
    # (1e-8 on the std would give 0.7070)
    out = whiten(_t(0.0, 1e-4), _t(1, 1))
    expected = 5e-5 / math.sqrt(5e-9 + 1e-8)
    torch.testing.assert_close(out, _t(-expected, expected), atol=1e-5, rtol=1e-4)


def test_whiten_lists_and_empty_mask():
    out = whiten([_t(2, 4), _t(6, 8)], [_t(1, 1), _t(1, 0)])
    assert isinstance(out, list)
    torch.testing.assert_close(torch.cat(out), _t(-1, 0, 1, 2))
    with pytest.raises(ValueError, match="selects no token"):
        whiten(_t(1, 2), _t(0, 0))
