"""The static-cache decode path (``rollout.cuda_graphs``), run eagerly on the CPU.

On CUDA the same steps are captured once and replayed; capture itself needs a GPU and is
exercised by ``bench/gpu_anchor.py`` and by the last test here, which runs on a CUDA device
only (``bench/h200_smollm2.sh gputests``). What is checked on the CPU: the static cache, the
growing decode mask, the grouped-query decode attention and the fixed batch give the
dynamic-cache loop's tokens and log-probs.
"""

from __future__ import annotations

import pytest
import torch
from slime_hookspecs import SamplingParams
from slime_std.engine.static_decode import (
    BUCKET,
    StaticDecoders,
    cache_length,
    compile_options,
    grouped_decode_attention,
)

from .conftest import TINY_QWEN2
from .test_engine_generate import PROMPTS, full_forward_log_probs

# 4 query heads over 2 key/value heads: the grouped-query path is taken
assert TINY_QWEN2["num_attention_heads"] > TINY_QWEN2["num_key_value_heads"]


def _static(engine):
    engine._static = StaticDecoders(capture=False)
    return engine


def _assert_matches(engine, prompts, dynamic, static, temperature) -> None:
    """The static path's tokens and log-probs are the dynamic cache's, and its log-probs a
    full unpadded forward's."""
    for prompt, d, s in zip(prompts, dynamic, static, strict=True):
        assert s.token_ids == d.token_ids
        torch.testing.assert_close(torch.tensor(s.log_probs), torch.tensor(d.log_probs),
                                   atol=1e-5, rtol=0)
        ref = full_forward_log_probs(engine._model, prompt, s.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(s.log_probs), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=1.0, max_new_tokens=12, seed=3, ignore_eos=True),
    SamplingParams(temperature=0.7, top_k=5, top_p=0.9, max_new_tokens=12, seed=4,
                   ignore_eos=True),
    SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True),
], ids=["t1", "topk-topp", "greedy"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused-step", "transformers-step"])
def test_static_path_matches_the_dynamic_cache(make_engine, params, fused):
    dynamic = make_engine().generate(PROMPTS, [params] * len(PROMPTS))
    engine = _static(make_engine(rollout={"fused_decoder": fused}))
    static = engine.generate(PROMPTS, [params] * len(PROMPTS))
    assert len(engine._static._by_shape) == 1
    # rollout.fused_decoder: the decode steps go through the fused projections, else
    # transformers' modeling code
    (decoder,) = engine._static._by_shape.values()
    assert decoder.fused is (engine._fused if fused else None)
    assert (engine._fused is not None) is fused
    _assert_matches(engine, PROMPTS, dynamic, static, params.temperature)


def test_static_path_finishes_rows_early_and_reuses_its_buffers(make_engine):
    greedy = SamplingParams(temperature=0, max_new_tokens=20, ignore_eos=True)
    prompts = PROMPTS * 2
    params = [greedy.replace(max_new_tokens=1 if i % 4 else 20) for i in range(len(prompts))]
    dynamic = make_engine().generate(prompts, params)
    engine = _static(make_engine())
    first = engine.generate(prompts, params)
    again = engine.generate(prompts, params)  # same batch and cache length: same decoder
    assert len(engine._static._by_shape) == 1
    for p, d, a, b in zip(params, dynamic, first, again, strict=True):
        assert a.token_ids == b.token_ids == d.token_ids
        assert len(a.token_ids) == p.max_new_tokens
        assert a.finish_reason == d.finish_reason == "length"


def test_stop_tokens_and_a_second_shape(make_engine):
    engine = _static(make_engine())
    greedy = SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True)
    plain = make_engine().generate(PROMPTS[:2], [greedy] * 2)
    stop = plain[0].token_ids[2]
    params = [greedy.replace(stop_token_ids=[stop])] * 2
    want = make_engine().generate(PROMPTS[:2], params)
    got = engine.generate(PROMPTS[:2], params)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.finish_reason for o in got] == [o.finish_reason for o in want]
    assert got[0].finish_reason == "stop" and got[0].token_ids[-1] == stop
    engine.generate(PROMPTS, [greedy] * 4)
    assert len(engine._static._by_shape) == 2  # batch 2 and batch 4


@pytest.mark.parametrize("fused", [True, False], ids=["fused-step", "transformers-step"])
def test_a_groups_shared_prompt_is_prefilled_once(make_engine, fused):
    """Rows holding the same prompt (a group's samples) are prefilled once: the model sees
    one row per distinct prompt, and every row's tokens and log-probs are the dynamic
    cache's (which prefills all rows)."""
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11, ignore_eos=True)
    prompts = [PROMPTS[2]] * 3 + [PROMPTS[1]] * 3 + [PROMPTS[0]] * 2
    dynamic = make_engine().generate(prompts, [params] * len(prompts))
    engine = _static(make_engine(rollout={"fused_decoder": fused}))
    widths: list[tuple[int, int]] = []  # (rows, tokens) of every forward, fused or not
    hook = engine._model.get_input_embeddings().register_forward_pre_hook(
        lambda _m, args: widths.append(tuple(args[0].shape)))
    model_calls: list[int] = []  # transformers' forward: none at all with the fused decoder
    whole = engine._model.register_forward_pre_hook(lambda *_: model_calls.append(1))
    try:
        static = engine.generate(prompts, [params] * len(prompts))
    finally:
        hook.remove()
        whole.remove()
    assert (not model_calls) is fused
    prompt_width = len(PROMPTS[2])
    assert widths[0] == (3, prompt_width)  # three distinct prompts, not eight rows
    assert all(w[1] == 1 for w in widths[1:])  # then single-token decode steps only
    _assert_matches(engine, prompts, dynamic, static, params.temperature)
    # a second batch reuses the decoder: its static cache is rewound, not appended to
    again = engine.generate(prompts, [params] * len(prompts))
    assert [a.token_ids for a in again] == [s.token_ids for s in static]


def test_cache_length_is_bucketed():
    assert cache_length(7, 12) == BUCKET
    assert cache_length(BUCKET - 12, 12) == BUCKET
    assert cache_length(BUCKET - 11, 12) == 2 * BUCKET


def test_grouped_decode_attention_equals_repeated_heads():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class Mod:
        num_key_value_groups = 3
        is_causal = True

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 1, 8, generator=g)
    k = torch.randn(2, 2, 5, 8, generator=g)
    v = torch.randn(2, 2, 5, 8, generator=g)
    mask = torch.tensor([[True, True, False, True, False], [False, True, True, True, True]])
    mask = mask[:, None, None, :]
    got, _ = grouped_decode_attention(Mod(), q, k, v, mask, scaling=0.3)
    want, _ = sdpa_attention_forward(Mod(), q, k, v, mask, scaling=0.3)
    assert got.shape == want.shape == (2, 1, 6, 8)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_cuda_graphs_flag_is_off_on_the_cpu(make_engine):
    assert make_engine(rollout={"cuda_graphs": True})._static is None


@pytest.mark.parametrize("options", [{}, compile_options(autotune=True, pdl=True)],
                         ids=["default", "autotune-pdl"])
def test_compiled_decode_step_matches_the_dynamic_cache(make_engine, options):
    """``rollout.compile_decode``: the torch.compile'd step (inductor's CPU backend here; on
    CUDA the compiled step is what the graph captures) gives the eager loop's tokens and
    log-probs, also with ``rollout.compile_autotune`` and ``compile_pdl``'s options (on the
    CPU inductor's C++ templates are what autotuning weighs; PDL is a Triton option, so
    here it shows only that the options reach ``torch.compile`` and change nothing computed)."""
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=5, ignore_eos=True)
    dynamic = make_engine().generate(PROMPTS, [params] * len(PROMPTS))
    engine = make_engine()
    engine._static = StaticDecoders(capture=False, compile_step=True, options=options)
    static = engine.generate(PROMPTS, [params] * len(PROMPTS))
    for d, s in zip(dynamic, static, strict=True):
        assert s.token_ids == d.token_ids
        torch.testing.assert_close(torch.tensor(s.log_probs), torch.tensor(d.log_probs),
                                   atol=1e-5, rtol=0)


def test_compile_options_name_inductors_settings():
    assert compile_options(autotune=False, pdl=False) == {}
    assert compile_options(autotune=False, pdl=True) == {"triton.enable_pdl": True}
    tuned = compile_options(autotune=True, pdl=False)
    assert tuned["max_autotune"] is True and "triton.enable_pdl" not in tuned


def test_compile_options_without_pdl_in_this_torch_warn_and_go_on(monkeypatch, caplog):
    from torch._inductor import config as inductor_config

    monkeypatch.delattr(inductor_config.triton, "enable_pdl")
    assert compile_options(autotune=False, pdl=True) == {}
    assert "rollout.compile_pdl" in caplog.text


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_fused_static_steps_match_the_dynamic_cache_for_other_families(make_engine, family):
    # Qwen3: per-head q/k norms before the rotary embedding; Llama: no projection biases
    base = {k: v for k, v in TINY_QWEN2.items() if k != "model_type"}
    init = {**base, "model_type": family, "head_dim": TINY_QWEN2["hidden_size"]
            // TINY_QWEN2["num_attention_heads"]}
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=5, ignore_eos=True)
    prompts = PROMPTS + PROMPTS[1:3]  # two prompts twice: the shared prefill too
    dynamic = make_engine(model={"init_config": init}).generate(prompts, [params] * len(prompts))
    engine = _static(make_engine(model={"init_config": init}))
    assert engine._fused is not None
    static = engine.generate(prompts, [params] * len(prompts))
    for d, s in zip(dynamic, static, strict=True):
        assert s.token_ids == d.token_ids
        torch.testing.assert_close(torch.tensor(s.log_probs), torch.tensor(d.log_probs),
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("splits", [None, 1, 3])
def test_fused_static_steps_with_the_triton_attention_and_its_column_splits(make_engine, splits,
                                                                          monkeypatch):
    """``rollout.decode_attention = "triton"`` in the fused step, with the kernel's own column
    splits and with ``rollout.decode_attention_splits`` pinned: the dynamic cache's tokens and
    log-probs. Runs where the kernels do: CUDA, or the CPU under ``TRITON_INTERPRET=1``."""
    from slime_core import kernels
    from slime_std.engine.static_decode import TRITON_ATTENTION_NAME

    if not kernels.available("cpu"):
        pytest.skip("needs triton under TRITON_INTERPRET=1 on the CPU")
    from slime_std.engine import static_decode

    # a 256-column cache (4 tiles), so that pinned splits really split and combine
    monkeypatch.setattr(static_decode, "BUCKET", 256)
    init = {**TINY_QWEN2, "hidden_size": 64}  # head dim 16: the kernel's smallest
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=5, ignore_eos=True)
    dynamic = make_engine(model={"init_config": init}).generate(PROMPTS, [params] * len(PROMPTS))
    engine = make_engine(model={"init_config": init})
    engine._static = StaticDecoders(capture=False, decode_attention="triton", splits=splits)
    static = engine.generate(PROMPTS, [params] * len(PROMPTS))
    (decoder,) = engine._static._by_shape.values()
    assert decoder.attention == TRITON_ATTENTION_NAME and decoder.splits == splits
    assert decoder.length == 256
    for d, s in zip(dynamic, static, strict=True):
        assert s.token_ids == d.token_ids
        torch.testing.assert_close(torch.tensor(s.log_probs), torch.tensor(d.log_probs),
                                   atol=1e-5, rtol=0)


def test_the_triton_attentions_head_dims_and_a_models_head_dim():
    """A head dim the decode attention kernel cannot take leaves a GPU engine on SDPA (the
    engine checks the model's at construction; ``auto`` resolves before the model is read):
    what the kernel takes, and the head dim read from a config with and without
    ``head_dim``. (The GPU engine's fallback itself runs in ``test_engine_stream.py``, whose
    tiny model has head dim 8.)"""
    from types import SimpleNamespace

    from slime_std.engine.floors import config_head_dim as _head_dim
    from slime_std.engine.kernels.decode_attention import head_dim_unsupported

    assert [d for d in (8, 16, 24, 64, 96, 128, 256) if head_dim_unsupported(d) is None] == [
        16, 64, 128, 256]
    assert "head dim 8" in str(head_dim_unsupported(8))
    assert _head_dim(SimpleNamespace(hidden_size=32, num_attention_heads=4)) == 8
    assert _head_dim(SimpleNamespace(hidden_size=32, num_attention_heads=4, head_dim=None)) == 8
    assert _head_dim(SimpleNamespace(hidden_size=1024, num_attention_heads=16,
                                     head_dim=128)) == 128
    assert _head_dim(SimpleNamespace(**TINY_QWEN2)) == (
        TINY_QWEN2["hidden_size"] // TINY_QWEN2["num_attention_heads"])


class _StandInGraph:
    """A CPU stand-in for a captured prefill: replay runs the captured function again and
    writes its logits into the tensor the capture returned, as a replay writes a graph's
    output in place."""

    def __init__(self, body):
        self.body = body
        self.replays = 0

    def replay(self):
        self.replays += 1
        self.logits.copy_(self.body())


def _stand_in_capture(prefill_graph, body, rewind, pool=None):
    body()  # the warm-up: it advances the write positions, which rewind puts back
    rewind()
    prefill_graph.pool = pool
    prefill_graph.graph = _StandInGraph(body)
    prefill_graph.logits = prefill_graph.graph.logits = body()
    rewind()  # a capture runs nothing: the replay that follows makes the writes


@pytest.mark.parametrize("shared", [False, True], ids=["distinct", "groups"])
def test_the_prefill_graphs_bookkeeping_on_the_cpu(make_engine, monkeypatch, shared):
    """The prefill graphs' logic, with a stand-in for the capture (the real one needs CUDA,
    below): a shape is prefilled eagerly at its first sight, captured at its second and
    replayed from then on, the replay reading the new prompts from its buffers; every call
    gives the eager engine's tokens and log-probs; at most PREFILL_GRAPHS shapes are kept."""
    from slime_std.engine import static_decode

    monkeypatch.setattr(static_decode._PrefillGraph, "capture", _stand_in_capture)
    monkeypatch.setattr(static_decode.torch.cuda, "graph_pool_handle", object)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=5, ignore_eos=True)
    prompts = [PROMPTS[2], PROMPTS[1], PROMPTS[0]]
    if shared:
        prompts = [p for p in prompts for _ in range(2)]
    others = [[(t * 7) % 60 + 3 for t in p] for p in prompts]  # same widths, other tokens
    eager, graphed = _static(make_engine()), _static(make_engine())
    decoder = graphed._static.get(graphed._model, len(prompts), len(PROMPTS[2]), 6,
                                  graphed._fused)
    decoder.prefill_graphs = True  # as a capturing engine's decoders have it
    runs, replays = [], []
    for batch in (prompts, others, prompts, others):
        want = eager.generate(batch, [params] * len(batch))
        got = graphed.generate(batch, [params] * len(batch))
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        torch.testing.assert_close(torch.tensor([g.log_probs for g in got]),
                                   torch.tensor([w.log_probs for w in want]), atol=1e-6, rtol=0)
        runs.append([g.token_ids for g in got])
        (graph,) = decoder._prefills.values() if decoder._prefills else (None,)
        replays.append(None if graph is None else graph.graph.replays)
    assert replays == [None, 1, 2, 3]  # eager, captured (and replayed), replayed twice
    assert runs[0] != runs[1] and runs[2] == runs[0] and runs[3] == runs[1]
    assert list(decoder._prefills) == [(3, len(PROMPTS[2]), shared, 0)]
    # a new shape of the same decoder: eager at its first sight, and with the set of shapes
    # full, eager from then on
    wider = [p + [4] for p in prompts]
    graphed.generate(wider, [params] * len(wider))
    assert len(decoder._prefills) == 1 and list(graphed._static._by_shape.values()) == [decoder]
    monkeypatch.setattr(static_decode, "PREFILL_GRAPHS", 1)
    for _ in range(2):
        graphed.generate(wider, [params] * len(wider))
    assert len(decoder._prefills) == 1


def test_a_prefill_above_the_token_cap_stays_eager(make_engine, monkeypatch):
    """A prompt shape of more than PREFILL_GRAPH_TOKENS tokens (prompts x width) is never
    captured, however often it comes; one at the cap is, at its second sight. The shapes'
    graphs are captured into one memory pool of the engine, a new one after a clear."""
    from slime_std.engine import static_decode

    monkeypatch.setattr(static_decode._PrefillGraph, "capture", _stand_in_capture)
    monkeypatch.setattr(static_decode.torch.cuda, "graph_pool_handle", object)
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=5, ignore_eos=True)
    prompts = [PROMPTS[2], PROMPTS[1], PROMPTS[0]]
    tokens = len(prompts) * len(PROMPTS[2])
    graphed = _static(make_engine())
    decoder = graphed._static.get(graphed._model, len(prompts), len(PROMPTS[2]), 4,
                                  graphed._fused)
    decoder.prefill_graphs = True
    monkeypatch.setattr(static_decode, "PREFILL_GRAPH_TOKENS", tokens - 1)
    for _ in range(3):
        graphed.generate(prompts, [params] * len(prompts))
    assert not decoder._prefills
    monkeypatch.setattr(static_decode, "PREFILL_GRAPH_TOKENS", tokens)
    graphed.generate(prompts, [params] * len(prompts))
    assert list(decoder._prefills) == [(3, len(PROMPTS[2]), False, 0)]
    monkeypatch.setattr(static_decode, "PREFILL_GRAPH_TOKENS", 2 * tokens)
    wider = [p + [4] for p in prompts]  # another width, the same decoder (cache length)
    for _ in range(2):
        graphed.generate(wider, [params] * len(wider))
    assert len(decoder._prefills) == 2
    pools = {id(g.pool) for g in decoder._prefills.values()}
    assert pools == {id(graphed._static.prefill_pool())}
    graphed._static.clear()
    assert graphed._static.prefill_pool() is not next(iter(decoder._prefills.values())).pool


def test_a_prefill_capture_out_of_memory_goes_on_eagerly(make_engine, monkeypatch):
    """A prefill capture that runs out of device memory (after its warm-up wrote the cache)
    costs nothing but the graphs: that generate and every later one give the eager
    engine's tokens and log-probs, with one warning, and the decoder captures no more."""
    from slime_std.engine import static_decode

    attempts = []

    def out_of_memory(prefill_graph, body, rewind, pool=None):
        attempts.append(1)
        body()  # the warm-up ran, and advanced the write positions
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(static_decode._PrefillGraph, "capture", out_of_memory)
    monkeypatch.setattr(static_decode.torch.cuda, "graph_pool_handle", object)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=5, ignore_eos=True)
    # 40-token prompts in a 64-column cache: a second prefill written after the warm-up's,
    # without its write positions put back, would run past the cache's end
    prompts = [(p * 40)[:n] for p, n in ((PROMPTS[2], 40), (PROMPTS[1], 37), (PROMPTS[0], 40))]
    eager, graphed = _static(make_engine()), _static(make_engine())
    decoder = graphed._static.get(graphed._model, len(prompts), 40, 6, graphed._fused)
    assert decoder.length == 64
    decoder.prefill_graphs = True
    for call in range(3):
        want = eager.generate(prompts, [params] * len(prompts))
        if call == 1:
            with pytest.warns(UserWarning, match="ran out of device memory"):
                got = graphed.generate(prompts, [params] * len(prompts))
        else:
            got = graphed.generate(prompts, [params] * len(prompts))
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        torch.testing.assert_close(torch.tensor([g.log_probs for g in got]),
                                   torch.tensor([w.log_probs for w in want]), atol=1e-6, rtol=0)
    assert attempts == [1] and not decoder._prefills and decoder.prefill_graphs is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("shared", [False, True], ids=["distinct", "groups"])
def test_a_prompt_shape_seen_before_replays_its_prefill_graph(make_cuda_engine, shared):
    """``rollout.prefill_graphs`` (run on the device by ``bench/h200_smollm2.sh gputests``):
    the first sight of a prompt shape prefills eagerly, the second captures, the third
    replays; every call gives the eager engine's tokens and log-probs, other prompts of the
    same shape too, and a weight update reaches the replayed prefill; a second shape's graph,
    in the same memory pool, replays in turn with the first."""
    prompts = [PROMPTS[2], PROMPTS[1], PROMPTS[0]]
    if shared:
        prompts = [p for p in prompts for _ in range(2)]
    others = [list(reversed(p)) for p in prompts]  # same widths, other tokens
    params = [SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True)] * len(prompts)
    eager = make_cuda_engine(rollout={"prefill_graphs": False})
    graphed = make_cuda_engine(rollout={"prefill_graphs": True})
    width = max(len(p) for p in prompts)
    decoder = graphed._static.get(graphed._model, len(prompts), width, 8, graphed._fused)

    def same(batch):
        want, got = eager.generate(batch, params), graphed.generate(batch, params)
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        torch.testing.assert_close(torch.tensor([g.log_probs for g in got]),
                                   torch.tensor([w.log_probs for w in want]), atol=1e-5, rtol=0)
        return want

    first = same(prompts)
    assert not decoder._prefills  # seen once: eager
    same(others)
    assert len(decoder._prefills) == 1  # seen twice: captured
    assert [o.token_ids for o in same(prompts)] == [o.token_ids for o in first]  # replayed
    gen = torch.Generator(device="cuda").manual_seed(0)
    new = {k: v + 0.5 * torch.randn(v.shape, device=v.device, generator=gen)
           for k, v in eager.state_dict().items()}
    for engine in (eager, graphed):
        engine.update_weights(new, 1)
    assert [o.token_ids for o in same(prompts)] != [o.token_ids for o in first]
    assert len(decoder._prefills) == 1
    # a second shape captured into the same pool; the two replayed in turn, each as eager
    wider = [p + [4] for p in prompts]
    same(wider)
    same(wider)
    assert len(decoder._prefills) == 2
    for batch in (prompts, wider, others, wider):
        same(batch)
