"""``LocalEngine.generate``: exact log-probs, greedy, stop conditions, seeds, mixed batches."""

from __future__ import annotations

import math

import pytest
import torch
from slime_hookspecs import SamplingParams

from .conftest import EOS_ID, TINY_QWEN2

PROMPTS = [[5, 6, 7], [9], [3, 14, 15, 9, 26, 5, 35], [40, 41]]  # different lengths: left padding


def full_forward_log_probs(model, prompt, tokens, temperature):
    """log_softmax(logits / T) at ``tokens`` from one unpadded, uncached forward pass."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return logp.gather(1, torch.tensor(tokens).unsqueeze(1)).squeeze(1)


def greedy_reference(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=1.0, max_new_tokens=12, ignore_eos=True),
    SamplingParams(temperature=0.7, top_k=5, top_p=0.9, max_new_tokens=12, ignore_eos=True),
    SamplingParams(temperature=1.3, top_p=0.5, max_new_tokens=12, ignore_eos=True),
    SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True),
], ids=["t1", "t0.7-topk-topp", "t1.3-topp", "greedy"])
def test_log_probs_equal_a_full_forward_with_left_padding(make_engine, params):
    engine = make_engine()
    outs = engine.generate(PROMPTS, [params] * len(PROMPTS))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert len(out.token_ids) == len(out.log_probs) == 12
        assert all(isinstance(x, float) for x in out.log_probs)
        ref = full_forward_log_probs(engine._model, prompt, out.token_ids, params.temperature)
        torch.testing.assert_close(torch.tensor(out.log_probs), ref, atol=1e-5, rtol=0)


def test_eager_attention_uses_the_2d_mask_path(make_engine):
    from slime_core.api import causal_sdpa_applies

    engine = make_engine(model={"init_config": dict(TINY_QWEN2, attn_implementation="eager")})
    assert not causal_sdpa_applies(engine._model.config)
    params = SamplingParams(temperature=0.8, max_new_tokens=10, ignore_eos=True)
    for prompt, out in zip(PROMPTS, engine.generate(PROMPTS, [params] * 4), strict=True):
        ref = full_forward_log_probs(engine._model, prompt, out.token_ids, 0.8)
        torch.testing.assert_close(torch.tensor(out.log_probs), ref, atol=1e-5, rtol=0)


def test_greedy_equals_the_argmax_continuation(make_engine):
    engine = make_engine()
    params = SamplingParams(temperature=0, max_new_tokens=16, ignore_eos=True)
    outs = engine.generate(PROMPTS, [params] * len(PROMPTS))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert out.token_ids == greedy_reference(engine._model, prompt, 16)
        assert out.finish_reason == "length"


def test_max_new_tokens_per_request_finishes_length(make_engine):
    engine = make_engine()
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (1, 5, 9, 3)]
    outs = engine.generate(PROMPTS, params)
    assert [len(o.token_ids) for o in outs] == [1, 5, 9, 3]
    assert {o.finish_reason for o in outs} == {"length"}
    assert all(o.weight_version == 0 for o in outs)


def test_stop_token_id_finishes_stop_with_the_token_included(make_engine):
    engine = make_engine()
    greedy = SamplingParams(temperature=0, max_new_tokens=16, ignore_eos=True)
    cont = engine.generate([PROMPTS[2]], [greedy])[0].token_ids
    stop_tok = cont[4]
    cut = cont.index(stop_tok) + 1
    out = engine.generate([PROMPTS[2]], [greedy.replace(stop_token_ids=[stop_tok])])[0]
    assert out.token_ids == cont[:cut]
    assert out.token_ids[-1] == stop_tok
    assert out.finish_reason == "stop"
    assert len(out.log_probs) == cut


def test_eos_stops_unless_ignore_eos(make_engine):
    engine = make_engine()
    hidden = engine._model.config.hidden_size
    # All-equal logits: argmax picks id 0, the tokenizer's <eos>; sampling is uniform.
    engine.update_weights({"model.norm.weight": torch.zeros(hidden)}, version=1)
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    out = engine.generate([[5, 6]], [greedy])[0]
    assert (out.token_ids, out.finish_reason) == ([EOS_ID], "stop")
    assert out.log_probs == pytest.approx([-math.log(64)], abs=1e-6)
    out = engine.generate([[5, 6]], [greedy.replace(ignore_eos=True)])[0]
    assert (out.token_ids, out.finish_reason) == ([EOS_ID] * 6, "length")
    assert out.text == ""  # special tokens are left out of the text


def test_stop_string_spanning_tokens(make_engine):
    engine = make_engine()
    tok = engine.tokenizer
    greedy = SamplingParams(temperature=0, max_new_tokens=24, ignore_eos=True)
    prompt = tok.encode("12+34=", add_special_tokens=False)
    cont = engine.generate([prompt], [greedy])[0].token_ids
    stop = tok.decode(cont[5:7], skip_special_tokens=True)  # spans two tokens
    assert stop
    cut = next(j + 1 for j in range(len(cont))
               if stop in tok.decode(cont[: j + 1], skip_special_tokens=True))
    out = engine.generate([prompt], [greedy.replace(stop=[stop])])[0]
    assert out.finish_reason == "stop"
    assert out.token_ids == cont[:cut]
    assert stop in out.text
    assert out.text == tok.decode(cont[:cut], skip_special_tokens=True)


def test_text_is_the_decoded_generated_ids(make_engine):
    engine = make_engine()
    outs = engine.generate(PROMPTS, [SamplingParams(max_new_tokens=10, ignore_eos=True)] * 4)
    for out in outs:
        assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_seeded_sampling_is_reproducible(make_engine):
    engine = make_engine()
    params = [SamplingParams(temperature=1.0, max_new_tokens=20, seed=7, ignore_eos=True)] * 4
    a = engine.generate(PROMPTS, params)
    b = engine.generate(PROMPTS, params)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.log_probs for o in a] == [o.log_probs for o in b]
    c = engine.generate(PROMPTS, [p.replace(seed=8) for p in params])
    assert [o.token_ids for o in a] != [o.token_ids for o in c]


def test_unseeded_sampling_follows_run_seed_and_engine_index(make_engine):
    params = [SamplingParams(max_new_tokens=20, ignore_eos=True)] * 4

    def tokens(engine):
        return [o.token_ids for o in engine.generate(PROMPTS, params)]

    first = tokens(make_engine())
    assert tokens(make_engine()) == first
    assert tokens(make_engine(engine_index=1)) != first
    assert tokens(make_engine(run={"seed": 5})) != first


def test_mixed_params_in_one_call(make_engine):
    engine = make_engine()
    greedy = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)
    sampled = SamplingParams(temperature=0.9, top_k=4, max_new_tokens=8, ignore_eos=True)
    alone = engine.generate([PROMPTS[0], PROMPTS[2]], [greedy, greedy])
    mixed = engine.generate(PROMPTS, [greedy, sampled, greedy, sampled.replace(seed=3)])
    assert mixed[0].token_ids == alone[0].token_ids
    assert mixed[2].token_ids == alone[1].token_ids
    for prompt, out, p in zip(PROMPTS, mixed, [greedy, sampled, greedy, sampled], strict=True):
        ref = full_forward_log_probs(engine._model, prompt, out.token_ids, p.temperature)
        torch.testing.assert_close(torch.tensor(out.log_probs), ref, atol=1e-5, rtol=0)


def test_generate_batch_size_cap_keeps_order(make_engine):
    greedy = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)
    prompts = PROMPTS * 3
    whole = make_engine().generate(prompts, [greedy] * len(prompts))
    capped = make_engine(rollout={"generate_batch_size": 5}).generate(prompts, [greedy] * len(prompts))
    assert [o.token_ids for o in capped] == [o.token_ids for o in whole]


def test_finished_rows_are_dropped_without_changing_results(make_engine):
    # Most rows stop after 1-2 tokens, so the batch is compacted while the others go on.
    engine = make_engine()
    greedy = SamplingParams(temperature=0, max_new_tokens=20, ignore_eos=True)
    prompts = PROMPTS * 2
    params = [greedy.replace(max_new_tokens=1 if i % 4 else 20) for i in range(len(prompts))]
    outs = engine.generate(prompts, params)
    for prompt, p, out in zip(prompts, params, outs, strict=True):
        assert out.token_ids == greedy_reference(engine._model, prompt, p.max_new_tokens)


def test_bad_requests_fail_clearly(make_engine):
    engine = make_engine()
    with pytest.raises(ValueError, match="2 prompts but 1 sampling params"):
        engine.generate([[1], [2]], [SamplingParams()])
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        engine.generate([[]], [SamplingParams()])
    with pytest.raises(ValueError, match="token id 64"):
        engine.generate([[64]], [SamplingParams()])
    assert engine.generate([], []) == []


def test_sample_kernel_triton_gives_the_full_forward_log_probs(make_engine):
    # rollout.sample_kernel = "triton": the race as the Triton kernel (runs on CUDA, or on the
    # CPU under TRITON_INTERPRET=1); without either it is refused, naming the key
    from slime_core import kernels

    params = SamplingParams(temperature=0.8, max_new_tokens=6, ignore_eos=True, seed=3)
    if not kernels.available("cpu"):
        with pytest.raises(RuntimeError, match="rollout.sample_kernel"):
            make_engine(rollout={"sample_kernel": "triton"})
        return
    engine = make_engine(rollout={"sample_kernel": "triton"})
    outs = engine.generate(PROMPTS, [params] * len(PROMPTS))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert len(out.token_ids) == 6
        ref = full_forward_log_probs(engine._model, prompt, out.token_ids, 0.8)
        torch.testing.assert_close(torch.tensor(out.log_probs), ref, atol=1e-5, rtol=0)
    again = engine.generate(PROMPTS, [params] * len(PROMPTS))
    assert [o.token_ids for o in again] == [o.token_ids for o in outs]  # seeded
