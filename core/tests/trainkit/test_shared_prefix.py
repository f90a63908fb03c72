"""``train.shared_prefix``: response log-probs with each shared prompt computed once equal one
unpadded forward per sample, in values and in every parameter's gradient, for every model
family the fused head supports (GQA, biases, llama3 rope, Qwen3 q/k norms, Mistral)."""

from __future__ import annotations

import pytest
import torch
from slime_core.testing import TINY_DECODERS as ARCHS
from slime_core.testing import tiny_decoder as _model
from slime_core.trainkit.batching import response_log_probs
from slime_core.trainkit.shared_prefix import prompt_groups, shared_prefix_hidden

from .test_trainer_log_probs import _reference

PAD = 0


def _batch(vocab: int) -> tuple[list[torch.Tensor], list[int]]:
    """Three prompts of different lengths (so the prompt pass pads), in groups of 3, 2 and 1,
    interleaved, with responses of different lengths: one token, and empty."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, vocab, (n,), generator=g) for n in (6, 3, 9)]
    plan = [(0, 5), (1, 1), (0, 7), (2, 4), (1, 6), (0, 0)]
    tokens = [torch.cat((prompts[p], torch.randint(1, vocab, (r,), generator=g))) for p, r in plan]
    return tokens, [r for _, r in plan]


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_shared_prefix_matches_per_sample_forwards(arch):
    model = _model(arch).train()
    tokens, resp = _batch(model.config.vocab_size)
    lps, ents = response_log_probs(model, tokens, resp, 0.8, PAD, with_entropy=True,
                                   fused_head=True, shared_prefix=True)
    assert [len(x) for x in lps] == [len(x) for x in ents] == resp
    (sum((lp * (i + 1)).sum() for i, lp in enumerate(lps)) + sum(e.sum() for e in ents)).backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    ref_lps, ref_ents = _reference(model, tokens, resp, 0.8)
    (sum((lp * (i + 1)).sum() for i, lp in enumerate(ref_lps))
     + sum(e.sum() for e in ref_ents)).backward()
    for a, b in zip(lps + ents, ref_lps + ref_ents, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
    for n, p in model.named_parameters():
        assert got[n].abs().sum() > 0, n  # every parameter, prompt pass included, gets a gradient
        torch.testing.assert_close(got[n], p.grad, atol=5e-5, rtol=1e-4, msg=n)


def test_prompt_padding_is_masked():
    """A prompt's row in the prompt pass is padded to the longest prompt; the padding keys
    must not reach its responses: changing the pad id changes nothing."""
    model = _model("qwen2_gqa_bias")
    tokens, resp = _batch(model.config.vocab_size)
    groups = prompt_groups(tokens, resp)
    with torch.no_grad():
        a, ta = shared_prefix_hidden(model.model, tokens, resp, groups, pad_id=0)
        b, tb = shared_prefix_hidden(model.model, tokens, resp, groups, pad_id=37)
    assert torch.equal(ta, tb)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_prompt_groups():
    t = [torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 5]), torch.tensor([1, 3, 3])]
    # prompts [1, 2], [1, 2], [1]: the first two share
    assert prompt_groups(t, [2, 1, 2]) == [0, 0, 1]
    assert prompt_groups(t, [2, 2, 2]) == [0, 1, 1]  # [1, 2], [1], [1]
    assert prompt_groups(t[:2], [1, 1]) is None  # [1, 2, 3] and [1, 2]: nothing shared
    assert prompt_groups(t, [4, 1, 2]) is None  # a sample without a prompt token


def test_no_shared_prompt_falls_back_to_one_row_per_sample():
    model = _model("llama_mha_untied")
    tokens, resp = _batch(model.config.vocab_size)
    keep = [0, 1, 3]  # one sample of each prompt
    tokens, resp = [tokens[i] for i in keep], [resp[i] for i in keep]
    assert prompt_groups(tokens, resp) is None
    with torch.no_grad():
        lps, _ = response_log_probs(model, tokens, resp, 1.0, PAD, fused_head=True,
                                    shared_prefix=True)
        ref, _ = _reference(model, tokens, resp, 1.0)
    for a, b in zip(lps, ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shared_prefix_on_cuda(dtype):
    """On a GPU (SDPA's CUDA kernels, padded masks): values and gradients against the one-row
    path, within the dtype's rounding."""
    model = _model("qwen2_gqa_bias").to("cuda", dtype).train()
    tokens, resp = _batch(model.config.vocab_size)
    tokens = [t.cuda() for t in tokens]
    out = {}
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        lps, _ = response_log_probs(model, tokens, resp, 0.8, PAD, fused_head=True,
                                    shared_prefix=shared)
        sum((lp * (i + 1)).sum() for i, lp in enumerate(lps)).backward()
        out[shared] = (torch.cat(lps).float(),
                       {n: p.grad.float().clone() for n, p in model.named_parameters()})
    tol = 1e-4 if dtype == torch.float32 else 0.1
    torch.testing.assert_close(out[True][0], out[False][0], atol=tol, rtol=tol)
    for n, g in out[False][1].items():
        err = (out[True][1][n] - g).norm() / g.norm().clamp_min(1e-12)
        assert err < (1e-4 if dtype == torch.float32 else 0.05), (n, float(err))


def _weighted(lps, ents):
    return sum((lp * (i + 1)).sum() for i, lp in enumerate(lps)) + sum(e.sum() for e in ents)


@pytest.mark.parametrize("arch, attn", [(a, "sdpa") for a in sorted(ARCHS)]
                         + [("qwen2_gqa_bias", "eager")])
def test_the_graphed_two_passes_at_padded_buckets_match_per_sample_forwards(arch, attn):
    """``train.cuda_graphs`` with the shared prefix: the two passes at a bucket's shape (3
    prompts padded to 4 rows, 6 responses to 16, widths to 16), the attention masks built
    whole (what transformers takes as they are), replayed through the CPU stand-in capture:
    the per-sample values and gradients, twice through one bucket."""
    from slime_core.testing import static_buffer_graphs
    from slime_core.trainkit.graphed_decoder import GraphedDecoder

    model = _model(arch).train()
    model.config._attn_implementation = attn
    tokens, resp = _batch(model.config.vocab_size)
    ref_lps, ref_ents = _reference(model, tokens, resp, 0.8)
    _weighted(ref_lps, ref_ents).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    graphed = GraphedDecoder(model.model, PAD, make_graphed=static_buffer_graphs)
    graphed.zero_grads(model)
    for _ in range(2):
        lps, ents = response_log_probs(model, tokens, resp, 0.8, PAD, with_entropy=True,
                                       fused_head=True, shared_prefix=True, decoder=graphed)
        for a, b in zip(lps + ents, ref_lps + ref_ents, strict=True):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
        _weighted(lps, ents).backward()
    assert graphed.buckets == [("prefix", 4, 16, 16, 16)] and graphed.eager_calls == 0
    for n, p in model.named_parameters():
        if p.grad is not None:  # (zero_grads leaves an untied head's to autograd)
            torch.testing.assert_close(p.grad, 2 * want[n], atol=1e-4, rtol=1e-4, msg=n)


def test_a_layout_smaller_than_its_bucket_is_refused():
    from slime_core.trainkit.shared_prefix import prefix_layout

    tokens, resp = _batch(50)
    groups = prompt_groups(tokens, resp)
    layout = prefix_layout(tokens, resp, groups, PAD, bucket=lambda s: (4, 16, 8, 8))
    assert layout.ids1.shape == (4, 16) and layout.ids2.shape == (8, 8)
    assert layout.mask1[3].tolist() == [1] + [0] * 15  # a padding prompt: one open key
    assert layout.rows.tolist() == groups + [0, 0]
    with pytest.raises(ValueError, match=r"bucket \(2, 16, 8, 8\) is smaller than the "
                                         r"micro-batch's \(3, 9, 6, 6\)"):
        prefix_layout(tokens, resp, groups, PAD, bucket=lambda s: (2, 16, 8, 8))


def test_row_saving_and_the_graphs_threshold():
    """The graphs replay the two passes only where they skip a quarter of the token rows or
    more (their masked attention is slower than the one pass's causal kernel in bf16): the
    SmolLM2 example's shape (60-token prompts, 32-token responses, groups of 8) saves ~58%,
    the 0.5B anchor's (15 before 256) ~5%, which runs the one-pass graphs."""
    from slime_core.testing import static_buffer_graphs
    from slime_core.trainkit.batching import GRAPHED_PREFIX_SAVING
    from slime_core.trainkit.graphed_decoder import GraphedDecoder
    from slime_core.trainkit.shared_prefix import row_saving

    groups = [g for g in range(16) for _ in range(8)]
    smollm2 = row_saving([92] * 128, [32] * 128, groups)
    anchor = row_saving([271] * 128, [256] * 128, groups)
    assert 0.55 < smollm2 < 0.6 and 0.04 < anchor < 0.06
    assert anchor < GRAPHED_PREFIX_SAVING < smollm2
    assert row_saving([5, 5], [2, 2], [0, 1]) == pytest.approx(1 - (3 + 3 + 2) / 10)
    model = _model("qwen2_gqa_bias").train()
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(1, model.config.vocab_size, (3,), generator=g)
    tokens = [torch.cat((prompt, torch.randint(1, 50, (12,), generator=g))) for _ in range(4)]
    resp = [12] * 4  # 3 shared prompt tokens of 60 rows: ~13% saved, under the threshold
    graphed = GraphedDecoder(model.model, PAD, make_graphed=static_buffer_graphs)
    graphed.zero_grads(model)
    response_log_probs(model, tokens, resp, 1.0, PAD, fused_head=True, shared_prefix=True,
                       decoder=graphed)
    assert graphed.buckets == [(16, 16)]  # the one-pass forward's bucket
