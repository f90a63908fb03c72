"""The fused Llama-family decoder (``rollout.fused_decoder``) against the transformers forward.

Every supported architecture is built small from a config with large random weights, so
logits are peaked and differ between positions; a left-padded batch is prefilled and decoded
step by step through :class:`FusedDecoder` and each step's logits are compared with one
uncached transformers forward over the whole sequence (attention mask and position ids that
skip the padding).
"""

from __future__ import annotations

import pytest
import torch
from slime_core.testing import TINY_DECODER_COMMON, TINY_DECODERS, tiny_decoder
from slime_hookspecs import SamplingParams
from slime_std.engine.fused_decoder import FusedDecoder, unsupported

from .test_engine_generate import PROMPTS, full_forward_log_probs

COMMON = TINY_DECODER_COMMON
ARCHS = TINY_DECODERS
_model = tiny_decoder


def _reference_logits(model, rows: list[list[int]]) -> list[torch.Tensor]:
    """Logits at every position of each row, one unpadded forward each."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return [model(input_ids=torch.tensor([r], device=device)).logits[0].float() for r in rows]


def _run_fused(model, prompts: list[list[int]], new: list[list[int]]):
    """Prefill ``prompts`` left-padded, then feed ``new`` tokens; logits of each step."""
    n, width = len(prompts), max(len(p) for p in prompts)
    steps = len(new[0])
    ids = torch.tensor([[1] * (width - len(p)) + p for p in prompts])
    mask = torch.zeros((n, width + steps), dtype=torch.bool)
    for i, p in enumerate(prompts):
        mask[i, width - len(p):] = True
    pos = (mask[:, :width].long().cumsum(-1) - 1).clamp(min=0)
    fused = FusedDecoder(model)
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        fused.start(n, width + steps, ids.device, dtype, mask)
        out = [fused.prefill(ids, pos).float()]
        nxt = torch.tensor([len(p) for p in prompts]).unsqueeze(1)
        for s in range(steps):
            tok = torch.tensor([row[s] for row in new]).unsqueeze(1)
            out.append(fused.step(tok, nxt).float())
            nxt = nxt + 1
    return out


@pytest.mark.parametrize("streamed", [False, True], ids=["x@Wt", "(W@xt)t"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_fused_logits_match_transformers(arch, streamed, monkeypatch):
    from slime_std.engine import fused_decoder

    if streamed:  # every product in the orientation used for weights that stream from memory
        monkeypatch.setattr(fused_decoder, "STREAM_BYTES", 0)
    model = _model(arch)
    assert unsupported(model) is None
    gen = torch.Generator().manual_seed(1)
    new = torch.randint(3, 64, (len(PROMPTS), 6), generator=gen).tolist()
    fused = _run_fused(model, PROMPTS, new)
    refs = _reference_logits(model, [p + t for p, t in zip(PROMPTS, new, strict=True)])
    for i, (prompt, ref) in enumerate(zip(PROMPTS, refs, strict=True)):
        for s, step_logits in enumerate(fused):
            expected = ref[len(prompt) - 1 + s]
            assert expected.abs().max() > 1.0  # logits that would reveal a wrong position
            torch.testing.assert_close(step_logits[i], expected, atol=2e-5, rtol=1e-5)


def test_fused_bf16_stays_within_bf16_rounding_of_transformers():
    model = _model("qwen2_gqa_bias", torch.bfloat16)
    new = [[7, 8, 9]] * len(PROMPTS)
    fused = _run_fused(model, PROMPTS, new)
    refs = _reference_logits(model, [p + t for p, t in zip(PROMPTS, new, strict=True)])
    ref32 = _reference_logits(_model("qwen2_gqa_bias"),
                              [p + t for p, t in zip(PROMPTS, new, strict=True)])
    for i, prompt in enumerate(PROMPTS):
        for s, step_logits in enumerate(fused):
            at = len(prompt) - 1 + s
            # as far from transformers' bf16 result as that is from the fp32 one, give or take
            budget = 2 * (refs[i][at] - ref32[i][at]).abs().max() + 0.05
            assert (step_logits[i] - refs[i][at]).abs().max() <= budget


def test_projection_weights_become_views_of_the_fused_tensors():
    model = _model("qwen2_gqa_bias")
    fused = FusedDecoder(model)
    attn = model.model.layers[0].self_attn
    layer = fused.layers[0]
    with torch.no_grad():
        attn.k_proj.weight.fill_(0.5)  # an in-place weight update on the model's side
        attn.v_proj.bias.fill_(-2.0)
    q_rows, k_rows = attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0]
    assert torch.all(layer.qkv.weight[q_rows:q_rows + k_rows] == 0.5)
    assert torch.all(layer.qkv.bias[q_rows + k_rows:] == -2.0)
    assert attn.k_proj.weight.is_contiguous() and not attn.k_proj.weight.requires_grad
    assert set(dict(model.named_parameters())) == {n for n, _ in _model("qwen2_gqa_bias").named_parameters()}


def test_unsupported_models_say_why():
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32))
    assert "no .model.layers" in unsupported(gpt2)
    sliding = Qwen2ForCausalLM(Qwen2Config(**COMMON, num_attention_heads=4, num_key_value_heads=2,
                                           use_sliding_window=True, sliding_window=8,
                                           max_window_layers=0))
    assert "sliding" in unsupported(sliding)
    gelu = Qwen2ForCausalLM(Qwen2Config(**COMMON, num_attention_heads=4, num_key_value_heads=2,
                                        hidden_act="gelu"))
    assert "hidden_act 'gelu'" in unsupported(gelu)
    dynamic = Qwen2ForCausalLM(Qwen2Config(**COMMON, num_attention_heads=4, num_key_value_heads=2,
                                           rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                            "rope_theta": 10000.0}))
    assert "rope type 'dynamic'" in unsupported(dynamic)
    with pytest.raises(ValueError, match="fused decoder: hidden_act"):
        FusedDecoder(gelu)


def test_engine_uses_the_fused_decoder_and_matches_transformers(make_engine):
    fused = make_engine()
    plain = make_engine(rollout={"fused_decoder": False})
    assert fused._fused is not None and fused.fused_unsupported is None
    assert plain._fused is None
    params = [SamplingParams(temperature=1.0, max_new_tokens=10 if i % 2 else 3, seed=5,
                             ignore_eos=True) for i in range(len(PROMPTS) * 2)]
    prompts = PROMPTS * 2  # rows of 3 tokens finish early and are dropped from the batch
    a = fused.generate(prompts, params)
    b = plain.generate(prompts, params)
    for prompt, x, y, p in zip(prompts, a, b, params, strict=True):
        assert x.token_ids == y.token_ids and len(x.token_ids) == p.max_new_tokens
        ref = full_forward_log_probs(plain._model, prompt, x.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(x.log_probs), ref, atol=1e-5, rtol=0)


def test_engine_weight_update_reaches_the_fused_decoder(make_engine):
    engine = make_engine()
    # lm_head.weight is tied to the embedding: one name of the two is enough
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in engine.state_dict().items()
           if k != "lm_head.weight"}
    engine.update_weights(new, version=1)
    served = engine.state_dict()
    for name, value in new.items():
        assert torch.equal(served[name], value), name
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=2, ignore_eos=True)
    outs = engine.generate(PROMPTS, [params] * len(PROMPTS))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        ref = full_forward_log_probs(engine._model, prompt, out.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(out.log_probs), ref, atol=1e-5, rtol=0)


def test_shared_prompts_are_prefilled_once_with_the_same_result():
    model = _model("qwen2_gqa_bias")
    prompts = [PROMPTS[2], PROMPTS[0], PROMPTS[2], PROMPTS[3], PROMPTS[0]]  # padded, repeated
    distinct = torch.tensor([0, 1, 3])  # one row per distinct prompt
    rows = torch.tensor([0, 1, 0, 2, 1])  # which of them each row holds
    n, width = len(prompts), max(len(p) for p in prompts)

    def padded(ps):
        ids = torch.tensor([[1] * (width - len(p)) + p for p in ps])
        mask = torch.zeros((len(ps), width + 3), dtype=torch.bool)
        for i, p in enumerate(ps):
            mask[i, width - len(p):] = True
        return ids, mask, (mask[:, :width].long().cumsum(-1) - 1).clamp(min=0)

    ids, mask, pos = padded(prompts)
    outs = []
    with torch.no_grad():
        for shared in (False, True):
            fused = FusedDecoder(model)
            fused.start(n, width + 3, ids.device, torch.float32, mask)
            first = fused.prefill(ids, pos, distinct, rows) if shared else fused.prefill(ids, pos)
            nxt = torch.tensor([len(p) for p in prompts]).unsqueeze(1)
            after = fused.step(torch.full((n, 1), 9), nxt)
            outs.append((first, after, [k.clone() for k in fused.k]))
    (a1, a2, ak), (b1, b2, bk) = outs
    torch.testing.assert_close(b1, a1, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b2, a2, atol=1e-5, rtol=1e-5)
    for x, y in zip(ak, bk, strict=True):  # prompt and first step columns of every row
        torch.testing.assert_close(y[:, :, : width + 1], x[:, :, : width + 1], atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_decoder_on_cuda_matches_transformers(dtype):
    """The path a CUDA engine takes without ``rollout.cuda_graphs``. Written in a session
    without device time: not yet run on a GPU."""
    model = _model("qwen2_gqa_bias", dtype).to("cuda")
    new = [[7, 8, 9, 10]] * len(PROMPTS)
    n, width = len(PROMPTS), max(len(p) for p in PROMPTS)
    ids = torch.tensor([[1] * (width - len(p)) + p for p in PROMPTS], device="cuda")
    mask = torch.zeros((n, width + 4), dtype=torch.bool, device="cuda")
    for i, p in enumerate(PROMPTS):
        mask[i, width - len(p):] = True
    pos = (mask[:, :width].long().cumsum(-1) - 1).clamp(min=0)
    fused = FusedDecoder(model)
    with torch.no_grad():
        fused.start(n, width + 4, ids.device, dtype, mask)
        got = [fused.prefill(ids, pos).float()]
        nxt = torch.tensor([len(p) for p in PROMPTS], device="cuda").unsqueeze(1)
        for s in range(4):
            got.append(fused.step(torch.tensor([r[s] for r in new], device="cuda")[:, None],
                                  nxt).float())
            nxt = nxt + 1
    refs = _reference_logits(model, [p + t for p, t in zip(PROMPTS, new, strict=True)])
    tol = 1e-4 if dtype == torch.float32 else 0.05  # bf16: a few units of its 8-bit mantissa
    for i, prompt in enumerate(PROMPTS):
        for s, step_logits in enumerate(got):
            expected = refs[i][len(prompt) - 1 + s]
            assert (step_logits[i] - expected).abs().max() <= tol * max(1.0, float(expected.abs().max()))


def _request(prompt):
    from types import SimpleNamespace

    return SimpleNamespace(prompt=prompt)  # all common_prefix_length reads of a Request


def test_common_prefix_length(monkeypatch):
    from slime_std.engine import decoding
    from slime_std.engine.decoding import common_prefix_length

    pre = list(range(10, 20))
    prompts = [pre + [1, 2], pre + [3], pre + [4, 5, 6]]
    monkeypatch.setattr(decoding, "MIN_PREFIX_SAVING", 20)  # (3 - 1) x 10 saves 20 tokens
    assert common_prefix_length([_request(p) for p in prompts]) == 10
    assert common_prefix_length([_request(p) for p in prompts[:2]]) == 0  # saves 10 < 20
    monkeypatch.setattr(decoding, "MIN_PREFIX_SAVING", 1)
    # every prompt keeps a token after the prefix; one prompt alone (a group) has none apart
    assert common_prefix_length([_request(p) for p in [pre, pre + [1], pre + [2]]]) == 9
    assert common_prefix_length([_request(pre + [1])] * 4) == 0
    assert common_prefix_length([_request([1] + pre), _request([2] + pre)]) == 0
    assert common_prefix_length([]) == 0


@pytest.mark.parametrize("static", [False, True], ids=["dynamic-cache", "static-cache"])
@pytest.mark.parametrize("pre", [[20, 21, 22, 23, 24], [20]], ids=["5-tokens", "1-token"])
def test_a_common_prefix_is_computed_once_with_the_same_result(make_engine, monkeypatch,
                                                              static, pre):
    """``rollout.common_prefix``: the prompts' common first tokens go through the model once
    (one row), then each distinct prompt's rest; the tokens and log-probs are transformers'
    (left padding, every row whole) and a full forward's. A one-token prefix (a BOS) is a
    one-token forward, which takes the decode attention's path."""
    from slime_std.engine import decoding
    from slime_std.engine.static_decode import StaticDecoders

    monkeypatch.setattr(decoding, "MIN_PREFIX_SAVING", 1)
    prompts = [pre + PROMPTS[2], pre + PROMPTS[1], pre + PROMPTS[2], pre + PROMPTS[3],
               pre + PROMPTS[0]]  # of different lengths, one of them twice (a group)
    params = [SamplingParams(temperature=1.0, max_new_tokens=6, seed=8, ignore_eos=True)]
    engine = make_engine(rollout={"common_prefix": True})
    if static:
        engine._static = StaticDecoders(capture=False)
    plain = make_engine(rollout={"fused_decoder": False})
    widths: list[tuple[int, ...]] = []
    hook = engine._model.get_input_embeddings().register_forward_pre_hook(
        lambda _m, args: widths.append(tuple(args[0].shape)))
    try:
        got = engine.generate(prompts, params * len(prompts))
    finally:
        hook.remove()
    want = plain.generate(prompts, params * len(prompts))
    width = max(len(p) for p in prompts)
    # the prefix for one row, then the four distinct prompts' rest, then decode steps
    assert widths[:2] == [(1, len(pre)), (4, width - len(pre))]
    assert all(w[1] == 1 for w in widths[2:])
    for prompt, g, w in zip(prompts, got, want, strict=True):
        assert g.token_ids == w.token_ids
        ref = full_forward_log_probs(plain._model, prompt, g.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(g.log_probs), ref, atol=1e-5, rtol=0)
    # off (or below the saving), the prefill is whole
    widths.clear()
    hook = engine._model.get_input_embeddings().register_forward_pre_hook(
        lambda _m, args: widths.append(tuple(args[0].shape)))
    monkeypatch.setattr(decoding, "MIN_PREFIX_SAVING", 10**6)
    try:
        again = engine.generate(prompts, params * len(prompts))
    finally:
        hook.remove()
    assert widths[0] == (4, width)
    assert [a.token_ids for a in again] == [g.token_ids for g in got]
