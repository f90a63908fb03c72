"""``response_log_probs``: the batched gather equals one unpadded forward per sample, in values
and in gradients, with right padding and responses of different lengths."""

from __future__ import annotations

import pytest
import torch
from slime_core.models.loading import load_causal_lm
from slime_core.testing import TINY_QWEN2, build_test_config
from slime_core.trainkit.batching import response_log_probs

PAD = 0


def _model() -> torch.nn.Module:
    config = build_test_config(model={"init_config": dict(TINY_QWEN2, initializer_range=0.2)})
    return load_causal_lm(config.model, "cpu", torch.float32, seed=3)


def _batch() -> tuple[list[torch.Tensor], list[int]]:
    g = torch.Generator().manual_seed(0)
    lengths, resp = [9, 4, 12, 6], [5, 1, 7, 0]  # a one-token and an empty response too
    return [torch.randint(1, 128, (n,), generator=g) for n in lengths], resp


def _reference(model, tokens, resp, temperature):
    """Per sample: an unpadded forward, log_softmax(logits / T) at the response tokens."""
    lps, ents = [], []
    for t, r in zip(tokens, resp, strict=True):
        logits = model(input_ids=t.unsqueeze(0)).logits[0, len(t) - r - 1 : len(t) - 1]
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        lps.append(logp.gather(1, t[len(t) - r :].unsqueeze(1)).squeeze(1))
        ents.append(-(logp.exp() * logp).sum(-1))
    return lps, ents


@pytest.mark.parametrize("fused", [False, True], ids=["model_forward", "fused_head"])
def test_values_and_gradients_match_per_sample_forwards(fused):
    model = _model()
    tokens, resp = _batch()
    lps, ents = response_log_probs(model, tokens, resp, 0.7, PAD, with_entropy=True,
                                   fused_head=fused)
    assert [len(x) for x in lps] == [len(x) for x in ents] == resp
    (sum(lp.sum() for lp in lps) + sum(e.sum() for e in ents)).backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    ref_lps, ref_ents = _reference(model, tokens, resp, 0.7)
    (sum(lp.sum() for lp in ref_lps) + sum(e.sum() for e in ref_ents)).backward()
    for a, b in zip(lps + ents, ref_lps + ref_ents, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, atol=1e-5, rtol=1e-4, msg=n)


@pytest.mark.parametrize("fused", [False, True], ids=["model_forward", "fused_head"])
def test_entropy_without_gradient_and_greedy_temperature(fused):
    model = _model()
    tokens, resp = _batch()
    lps, ents = response_log_probs(model, tokens, resp, 0.0, PAD, with_entropy=True,
                                   entropy_grad=False, fused_head=fused)
    assert lps[0].requires_grad and not ents[0].requires_grad
    ref_lps, _ = _reference(model, tokens, resp, 1.0)  # greedy scores at T = 1
    for a, b in zip(lps, ref_lps, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        lps, ents = response_log_probs(model, tokens, resp, 1.0, PAD, fused_head=fused)
    assert ents is None and not lps[2].requires_grad
