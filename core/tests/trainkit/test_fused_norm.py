"""``train.fused_norm``: the fused RMSNorm forward against transformers' own, on the tiny
Qwen2 (values and every gradient, fp32 and bf16), and which modules it changes (the torch
trainer's use: plugins/slime_std/tests/trainer/test_trainer_fused_norm.py)."""

from __future__ import annotations

import copy

import pytest
import torch
from slime_core.models.loading import load_causal_lm
from slime_core.testing import TINY_QWEN2, build_test_config
from slime_core.trainkit.fused_norm import fuse_rms_norms


def _model(dtype: torch.dtype) -> torch.nn.Module:
    cfg = build_test_config(model={"init_config": dict(TINY_QWEN2)})
    model = load_causal_lm(cfg.model, torch.device("cpu"), dtype, seed=3)
    with torch.no_grad():  # norms that are not all ones, so the weight's place matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p.float()).to(p.dtype))
    return model


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, use_cache=False).logits.float()
    loss = torch.log_softmax(logits, -1)[..., 0].mean()
    loss.backward()
    return logits.detach(), {n: p.grad.float().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 6e-2)])
def test_same_values_and_gradients_as_transformers(dtype, tol) -> None:
    plain = _model(dtype)
    fused = copy.deepcopy(plain)
    layers = TINY_QWEN2["num_hidden_layers"]
    assert fuse_rms_norms(fused) == 2 * layers + 1  # two per layer and the final norm
    ids = torch.randint(0, TINY_QWEN2["vocab_size"], (3, 11), generator=torch.Generator().manual_seed(0))
    want_logits, want = _loss_and_grads(plain, ids)
    got_logits, got = _loss_and_grads(fused, ids)
    assert (got_logits - want_logits).abs().max().item() <= tol * want_logits.abs().max().item()
    assert want.keys() == got.keys()
    for name in want:
        scale = want[name].abs().max().item() or 1.0
        assert (got[name] - want[name]).abs().max().item() <= tol * scale, name
    # a norm of another form (Gemma's 1 + weight) keeps its own forward
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    gemma = torch.nn.Sequential(GemmaRMSNorm(8))
    assert fuse_rms_norms(gemma) == 0
