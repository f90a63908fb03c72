"""Token choice: greedy, full and truncated sampling draw from the right distribution."""

from __future__ import annotations

import pytest
import torch
from slime_std.engine.sampler import GroupSampler, SamplingKey

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
N = 40000


def draw(temperature, top_k=-1, top_p=1.0, seed=0, race=None):
    gen = torch.Generator().manual_seed(seed)
    sampler = GroupSampler(SamplingKey(temperature, top_k, top_p, None), gen, race=race)
    tokens, lp = sampler(LOGITS.repeat(N, 1))
    return tokens, lp


def frequencies(tokens):
    return torch.bincount(tokens, minlength=LOGITS.numel()).float() / N


def test_greedy_takes_argmax_and_reports_t1_log_prob():
    tokens, lp = draw(0.0)
    assert set(tokens.tolist()) == {0}
    torch.testing.assert_close(lp, torch.log_softmax(LOGITS, -1)[0].expand(N))


@pytest.mark.parametrize("race", [False, True], ids=["cdf_inversion", "exponential_race"])
def test_full_sampling_matches_the_tempered_softmax(race):
    tokens, lp = draw(0.8, race=race)
    p = torch.softmax(LOGITS / 0.8, -1)
    torch.testing.assert_close(frequencies(tokens), p, atol=0.01, rtol=0)
    torch.testing.assert_close(lp, torch.log_softmax(LOGITS / 0.8, -1)[tokens])


def test_top_k_then_top_p_sample_the_renormalised_survivors_with_full_log_probs():
    tokens, lp = draw(1.0, top_k=4, top_p=0.8)
    p = torch.softmax(LOGITS, -1)
    top4 = p[:4] / p[:4].sum()  # 0.51, 0.19, 0.11, 0.07 ... cumulative before: 0, .51, .70, .81
    keep = top4[:3] / top4[:3].sum()
    expected = torch.zeros_like(p)
    expected[:3] = keep
    torch.testing.assert_close(frequencies(tokens), expected, atol=0.01, rtol=0)
    torch.testing.assert_close(lp, torch.log_softmax(LOGITS, -1)[tokens])  # not truncated


def test_top_p_keeps_at_least_one_token():
    tokens, _ = draw(1.0, top_p=0.01)
    assert set(tokens.tolist()) == {0}


@pytest.mark.parametrize("race", [False, True], ids=["cdf_inversion", "exponential_race"])
def test_generator_makes_draws_reproducible(race):
    assert torch.equal(draw(1.0, seed=3, race=race)[0], draw(1.0, seed=3, race=race)[0])
    assert not torch.equal(draw(1.0, seed=3, race=race)[0], draw(1.0, seed=4, race=race)[0])


def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_race_equals_the_eager_race(device, dtype):
    """``compiled=True`` (``rollout.compile_decode``): same generator state, same tokens, the
    same log-probs up to rounding, and a second row count (rows drop) still works."""
    g = torch.Generator(device=device).manual_seed(7)
    logits = (torch.randn(64, 3000, generator=g, device=device) * 3).to(dtype)
    key = SamplingKey(0.7, -1, 1.0, None)
    out = {}
    for compiled in (False, True):
        gen = torch.Generator(device=device).manual_seed(11)
        s = GroupSampler(key, gen, race=True, compiled=compiled)
        out[compiled] = [s(logits), s(logits[:40])]
    for (tok_e, lp_e), (tok_c, lp_c) in zip(out[False], out[True], strict=True):
        assert torch.equal(tok_e, tok_c)
        torch.testing.assert_close(lp_c, lp_e, atol=1e-4, rtol=1e-5)
    ref = torch.log_softmax(logits.float() / 0.7, -1)
    torch.testing.assert_close(out[True][0][1], ref.gather(1, out[True][0][0][:, None])[:, 0],
                               atol=1e-4, rtol=1e-5)


def test_compiled_race_matches_the_tempered_softmax():
    tokens, lp = GroupSampler(SamplingKey(0.8, -1, 1.0, None), torch.Generator().manual_seed(0),
                              race=True, compiled=True)(LOGITS.repeat(N, 1))
    torch.testing.assert_close(frequencies(tokens), torch.softmax(LOGITS / 0.8, -1), atol=0.01,
                               rtol=0)
    torch.testing.assert_close(lp, torch.log_softmax(LOGITS / 0.8, -1)[tokens])
