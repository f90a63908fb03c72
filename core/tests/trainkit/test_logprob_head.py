"""``logprob_head.head_log_probs`` against autograd through ``log_softmax(head(h) / T)``:
values, entropies and every gradient, over several chunks, with a bias, with and without the
entropy's gradient, compiled and eager; and which models it accepts."""

from __future__ import annotations

import pytest
import torch
from slime_core.models.loading import load_causal_lm
from slime_core.testing import TINY_QWEN2, build_test_config
from slime_core.trainkit import logprob_head
from slime_core.trainkit.logprob_head import head_log_probs


def _inputs(bias: bool, rows: int = 37, d: int = 16, vocab: int = 300):
    g = torch.Generator().manual_seed(1)
    head = torch.nn.Linear(d, vocab, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, d, generator=g))
        if bias:
            head.bias.copy_(torch.randn(vocab, generator=g))
    hidden = torch.randn(rows, d, generator=g, requires_grad=True)
    target = torch.randint(0, vocab, (rows,), generator=g)
    coef = torch.randn(rows, generator=g), torch.randn(rows, generator=g)
    return head, hidden, target, coef


def _reference(head, hidden, target, temperature):
    logp = torch.log_softmax(head(hidden).float() / temperature, dim=-1)
    return logp.gather(1, target[:, None]).squeeze(1), -(logp.exp() * logp).sum(-1)


def _grads(head, hidden):
    out = [hidden.grad.clone(), head.weight.grad.clone()]
    if head.bias is not None:
        out.append(head.bias.grad.clone())
    hidden.grad = None
    head.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_values_and_gradients_over_chunks(monkeypatch, bias, entropy_grad, temperature):
    for name in ("CHUNK_BYTES", "CPU_CHUNK_BYTES"):  # 8 rows a chunk: 5 chunks
        monkeypatch.setattr(logprob_head, name, 4 * 300 * 8)
    head, hidden, target, (a, b) = _inputs(bias)
    lp, ent = head_log_probs(hidden, head, target, temperature, entropy=True,
                             entropy_grad=entropy_grad)
    assert ent is not None and ent.requires_grad == entropy_grad
    ((lp * a).sum() + ((ent * b).sum() if entropy_grad else 0)).backward()
    got = _grads(head, hidden)
    ref_lp, ref_ent = _reference(head, hidden, target, temperature)
    ((ref_lp * a).sum() + ((ref_ent * b).sum() if entropy_grad else 0)).backward()
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent.detach(), atol=1e-5, rtol=1e-5)
    for x, y in zip(got, _grads(head, hidden), strict=True):
        torch.testing.assert_close(x, y, atol=1e-4, rtol=1e-4)


def test_without_autograd_and_without_entropy():
    head, hidden, target, _ = _inputs(False)
    with torch.no_grad():
        lp, ent = head_log_probs(hidden, head, target, 1.0, entropy=True)
    assert not lp.requires_grad and ent is not None
    torch.testing.assert_close(lp, _reference(head, hidden, target, 1.0)[0].detach())
    lp, ent = head_log_probs(hidden, head, target, 0.0)  # greedy scores at T = 1
    assert ent is None and lp.requires_grad
    torch.testing.assert_close(lp, _reference(head, hidden, target, 1.0)[0])
    empty = head_log_probs(hidden[:0], head, target[:0], 1.0, entropy=True)
    assert [x.shape for x in empty] == [(0,), (0,)]


def test_a_second_backward_is_refused_with_a_clear_error():
    head, hidden, target, _ = _inputs(False)
    lp, _ = head_log_probs(hidden, head, target, 1.0)
    lp.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        lp.sum().backward()


def test_bf16_logits_are_rounded_like_the_model_forward():
    """The head's logits stay in the model's dtype before the fp32 softmax, as in
    ``lm_head(h).float()``."""
    head, hidden, target, _ = _inputs(False)
    head = head.to(torch.bfloat16)
    h = hidden.detach().to(torch.bfloat16)
    lp, ent = head_log_probs(h, head, target, 1.0, entropy=True)
    ref_lp, ref_ent = _reference(head, h, target, 1.0)
    torch.testing.assert_close(lp, ref_lp.detach(), atol=1e-3, rtol=0)
    torch.testing.assert_close(ent, ref_ent.detach(), atol=1e-3, rtol=0)


def test_compiled_kernels_match_eager():
    head, hidden, target, (a, b) = _inputs(True, rows=21)
    out = {}
    for compiled in (False, True):
        lp, ent = head_log_probs(hidden, head, target, 0.8, entropy=True, compile=compiled)
        ((lp * a).sum() + (ent * b).sum()).backward()
        out[compiled] = [lp.detach(), ent.detach(), *_grads(head, hidden)]
    for x, y in zip(out[False], out[True], strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_which_models_are_accepted():
    config = build_test_config(model={"init_config": dict(TINY_QWEN2)})
    model = load_causal_lm(config.model, "cpu", torch.float32, seed=0)
    assert logprob_head.unsupported(model) is None
    assert "is not one of" in logprob_head.unsupported(torch.nn.Linear(2, 2))
    model.config.final_logit_softcapping = 30.0
    assert "soft-capping" in logprob_head.unsupported(model)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compiled", [False, True])
def test_cuda_bf16_at_the_anchor_vocabulary(compiled):
    """The 0.5B anchor's head (152k vocabulary, bf16) on a GPU, eager and compiled kernels,
    against autograd through ``log_softmax(head(h).float())``."""
    torch.manual_seed(0)
    rows, d, vocab = 3000, 896, 151936
    head = torch.nn.Linear(d, vocab, bias=False, device="cuda", dtype=torch.bfloat16)
    hidden = (torch.randn(rows, d, device="cuda") * 2).bfloat16().requires_grad_()
    target = torch.randint(0, vocab, (rows,), device="cuda")
    coef = torch.randn(rows, device="cuda")
    lp, ent = head_log_probs(hidden, head, target, 1.0, entropy=True, entropy_grad=True,
                             compile=compiled)
    ((lp * coef).sum() + ent.sum()).backward()
    got = [lp.detach(), ent.detach(), *_grads(head, hidden)]
    ref_lp, ref_ent = _reference(head, hidden, target, 1.0)
    ((ref_lp * coef).sum() + ref_ent.sum()).backward()
    ref = [ref_lp.detach(), ref_ent.detach(), *_grads(head, hidden)]
    torch.testing.assert_close(got[0], ref[0], atol=2e-3, rtol=0)
    torch.testing.assert_close(got[1], ref[1], atol=2e-3, rtol=0)
    for x, y in zip(got[2:], ref[2:], strict=True):  # bf16 gradients: relative to their scale
        assert (x.float() - y.float()).abs().max() <= 2e-2 * y.float().abs().max()
