"""``causal_attention``: the one-pass training forward calls SDPA causally with the grouped
key/value heads and no mask, eagerly and under ``torch.compile`` (where transformers would
build a mask and repeat the heads), with the values of transformers' own attention; models
whose mask is not purely causal keep their own."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from slime_core.testing import tiny_decoder
from slime_core.trainkit.batching import response_log_probs
from slime_core.trainkit.causal_attention import NAME, causal_attention, causal_sdpa_applies


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """(mask shape or None, is_causal, enable_gqa, key heads) of every SDPA call (traced ones
    included: the compiler runs this Python while it traces)."""
    calls: list[tuple[Any, ...]] = []
    real = F.scaled_dot_product_attention

    def record(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False):
        calls.append((None if attn_mask is None else tuple(attn_mask.shape), is_causal,
                      enable_gqa, k.shape[1]))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                    scale=scale, enable_gqa=enable_gqa)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", record)
    return calls


def _tokens(vocab: int) -> tuple[list[torch.Tensor], list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(1, vocab, (n,), generator=g) for n in (12, 15, 20, 9)], [4, 5, 6, 3]


@pytest.mark.parametrize("arch", ["qwen2_gqa_bias", "llama_mha_untied", "qwen3_qk_norm"])
def test_the_causal_call_gives_transformers_values_and_gradients(arch, sdpa_calls):
    model = tiny_decoder(arch).train()
    ids = torch.randint(1, model.config.vocab_size, (3, 17))
    runs = []
    for causal in (False, True):
        model.zero_grad(set_to_none=True)
        sdpa_calls.clear()
        with causal_attention(model.model) if causal else torch.enable_grad():
            hidden = model.model(input_ids=ids, use_cache=False)[0]
        hidden.pow(2).mean().backward()
        runs.append((hidden.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                       if p.grad is not None}))
        heads = model.config.num_key_value_heads
        assert sdpa_calls == [(None, True, heads != model.config.num_attention_heads, heads)] * 2
    assert model.config._attn_implementation == "sdpa"  # restored
    torch.testing.assert_close(runs[1][0], runs[0][0], atol=1e-6, rtol=1e-5)
    assert runs[0][1].keys() == runs[1][1].keys() and len(runs[0][1]) > 10
    for n, g in runs[0][1].items():
        torch.testing.assert_close(runs[1][1][n], g, atol=1e-6, rtol=1e-5, msg=n)


def test_under_compile_no_mask_is_built_and_the_heads_stay_grouped(sdpa_calls):
    """transformers builds a [B, 1, L, L] mask and repeats the key/value heads while dynamo
    traces (torch < 2.14); through the fused head, the compiled decoder calls SDPA causally
    with the grouped heads and gives the eager log-probs (``aot_eager``: dynamo and
    AOTAutograd without inductor's code generation, which takes minutes on a CPU)."""
    model = tiny_decoder("qwen2_gqa_bias").train()
    tokens, resp = _tokens(model.config.vocab_size)
    want, _ = response_log_probs(model, tokens, resp, 1.0, 0, fused_head=True)
    plain = torch.compile(model.model, backend="aot_eager", dynamic=False)
    sdpa_calls.clear()
    plain(input_ids=torch.randint(1, 64, (4, 20)), use_cache=False)
    assert sdpa_calls[0][0] == (4, 1, 20, 20) and sdpa_calls[0][3] == 4  # transformers' way
    torch._dynamo.reset()
    model.model.compile(backend="aot_eager", dynamic=False)
    sdpa_calls.clear()
    got, _ = response_log_probs(model, tokens, resp, 1.0, 0, fused_head=True)
    assert sdpa_calls and all(c == (None, True, True, 2) for c in sdpa_calls)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()


def test_only_purely_causal_sdpa_models_switch():
    model = tiny_decoder("qwen2_gqa_bias")
    assert causal_sdpa_applies(model.config)
    with causal_attention(model.model):
        assert model.config._attn_implementation == NAME
    windowed = tiny_decoder("mistral")
    windowed.config.sliding_window = 8
    assert not causal_sdpa_applies(windowed.config)
    with causal_attention(windowed.model):
        assert windowed.config._attn_implementation == "sdpa"
    windowed.config.sliding_window = None
    windowed.config.layer_types = ["full_attention", "sliding_attention"]
    assert not causal_sdpa_applies(windowed.config)
    eager = tiny_decoder("llama_mha_untied")
    eager.config._attn_implementation = "eager"
    assert not causal_sdpa_applies(eager.config)


def test_what_the_causal_call_cannot_stand_for_goes_to_transformers(sdpa_calls):
    """A key longer than the query (a cache) or a layer that is not causal: transformers' own
    SDPA function, with the mask it was given."""
    from slime_core.trainkit.causal_attention import causal_sdpa

    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    layer = torch.nn.Module()
    layer.num_key_value_groups = 2
    layer.is_causal = False
    causal_sdpa(layer, q, k, k, mask)
    longer = torch.randn(2, 2, 7, 8)
    layer.is_causal = True
    causal_sdpa(layer, q, longer, longer, torch.ones(2, 1, 5, 7, dtype=torch.bool))
    assert [c[0] for c in sdpa_calls] == [(2, 1, 5, 5), (2, 1, 5, 7)]
    sdpa_calls.clear()
    out, _ = causal_sdpa(layer, q, k, k, None)
    assert sdpa_calls == [(None, True, True, 2)] and out.shape == (2, 5, 4, 8)
