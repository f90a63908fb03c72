"""``train.cuda_graphs``' decoder (:class:`GraphedDecoder`) on the CPU, with
:func:`slime_core.testing.static_buffer_graphs` standing in for the capture: the bucketed,
padded batch gives the eager forward's log-probs and gradients, buckets are captured once,
and gradients of several micro-batches add up although each replay reuses its buffers.
The capture itself needs CUDA: ``bench/train_graphs.py`` checks it on a GPU."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from slime_core.testing import static_buffer_graphs, tiny_decoder
from slime_core.trainkit.batching import response_log_probs
from slime_core.trainkit.graphed_decoder import (
    CaptureOutOfMemory,
    GraphedDecoder,
    ReplacedGradients,
    graph_budget,
    trainable_bytes,
)

PAD = 0


def _batch(vocab: int, seed: int, rows: int = 5) -> tuple[list[torch.Tensor], list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(6, 30, (rows,), generator=g).tolist()
    tokens = [torch.randint(1, vocab, (n,), generator=g) for n in lengths]
    return tokens, [min(n - 1, 4 + i) for i, n in enumerate(lengths)]


def _loss(model, tokens, resp, decoder=None):
    lps, ents = response_log_probs(model, tokens, resp, 0.8, PAD, with_entropy=True,
                                   fused_head=True, decoder=decoder)
    return sum((lp * (i + 1)).sum() for i, lp in enumerate(lps)) + sum(e.sum() for e in ents)


class _Counting:
    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def __call__(self, module, sample_args, pool=None, fuse_linears=True):
        self.shapes.append(tuple(sample_args[0].shape))
        return static_buffer_graphs(module, sample_args, pool, fuse_linears)


def test_padded_buckets_give_the_eager_log_probs_and_gradients():
    model = tiny_decoder("qwen2_gqa_bias").train()
    maker = _Counting()
    graphed = GraphedDecoder(model.model, PAD, make_graphed=maker)
    tokens, resp = _batch(model.config.vocab_size, 0)
    _loss(model, tokens, resp).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    graphed.zero_grads()
    _loss(model, tokens, resp, graphed).backward()
    longest = max(len(t) for t in tokens)
    assert maker.shapes == [(16, 32)] and graphed.buckets == [(16, 32)]
    assert 16 < longest < 32  # the bucket padded rows and columns
    for n, p in model.named_parameters():
        # (other attention shapes, other rounding: the embedding's gradient, a sum over every
        # position, up to ~5e-5 apart at values up to ~70)
        torch.testing.assert_close(p.grad, want[n], atol=1e-4, rtol=1e-4, msg=n)


def test_a_compiled_bucket_gives_the_eager_log_probs_and_gradients():
    """``compiler`` (the trainer's ``torch.compile`` under ``train.compile``; here dynamo and
    AOTAutograd without inductor's code generation, which takes minutes on a CPU): each
    bucket's module goes through it before the capture, whose linear layers then accumulate
    through autograd (``fuse_linears=False``: the compiler does not trace their writes into
    ``.grad``); two micro-batches of the bucket add up to the eager gradients."""
    model = tiny_decoder("qwen2_gqa_bias").train()
    compiled: list[torch.nn.Module] = []
    fused: list[bool] = []

    def compiler(module: torch.nn.Module) -> torch.nn.Module:
        compiled.append(module)
        return torch.compile(module, backend="aot_eager", dynamic=False)

    def maker(module, sample_args, pool=None, fuse_linears=True):
        fused.append(fuse_linears)
        return static_buffer_graphs(module, sample_args, pool, fuse_linears)

    batches = [_batch(model.config.vocab_size, s) for s in (3, 4)]
    for tokens, resp in batches:
        _loss(model, tokens, resp).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    graphed = GraphedDecoder(model.model, PAD, make_graphed=maker, compiler=compiler)
    graphed.zero_grads(model)
    for tokens, resp in batches:
        _loss(model, tokens, resp, graphed).backward()
    assert len(graphed.buckets) == len(compiled) == 2 and fused == [False, False]
    assert all(m.decoder is model.model for m in compiled)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], atol=1e-4, rtol=1e-4, msg=n)


def test_micro_batches_add_up_in_the_captured_gradients():
    """Two micro-batches of one bucket: each replayed backward adds into the gradients the
    capture was made with, so after :meth:`zero_grads` their sum is the eager sum. Without
    allocated gradients (what ``optimizer.zero_grad()`` leaves) the capture refuses, and a
    gradient replaced after it (set to None and allocated again) makes the backward raise:
    the graph would add into the old tensor."""
    model = tiny_decoder("llama3_rope").train()
    batches = [_batch(model.config.vocab_size, s) for s in (1, 2)]
    for tokens, resp in batches:
        _loss(model, tokens, resp).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}

    def run(prepare) -> dict[str, torch.Tensor]:
        graphed = GraphedDecoder(model.model, PAD, make_graphed=static_buffer_graphs)
        model.zero_grad(set_to_none=True)
        prepare(graphed)
        for tokens, resp in batches:
            _loss(model, tokens, resp, graphed).backward()
        assert len(graphed.buckets) == 1
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    got = run(lambda g: g.zero_grads())
    for n in want:
        # the bucket's padded shapes sum in another order: up to 8.4e-5 apart at gradients up
        # to ~100 on an AMD EPYC (2e-5 passed on the earlier Xeon); the buffers' overwrite,
        # below, is orders of magnitude more
        torch.testing.assert_close(got[n], want[n], atol=1e-4, rtol=1e-4, msg=n)
    with pytest.raises(ReplacedGradients, match="gradients allocated"):
        run(lambda g: None)
    graphed = GraphedDecoder(model.model, PAD, make_graphed=static_buffer_graphs)
    graphed.zero_grads(model)
    (tokens, resp), second = batches
    _loss(model, tokens, resp, graphed).backward()
    model.zero_grad(set_to_none=True)
    graphed.zero_grads(model)  # new tensors: not the captured ones
    with pytest.raises(ReplacedGradients,
                       match=r"first: .*embed_tokens\.weight\).*zero_grads\(model\)"):
        _loss(model, tokens, resp, graphed).backward()


def test_each_bucket_is_captured_once_and_past_the_limit_runs_eagerly():
    model = tiny_decoder("qwen2_gqa_bias").train()
    maker = _Counting()
    graphed = GraphedDecoder(model.model, PAD, row_multiple=4, width_multiple=8, max_graphs=2,
                             make_graphed=maker)
    graphed.zero_grads()
    ids = torch.randint(1, model.config.vocab_size, (12, 40))
    with torch.no_grad():
        want = model.model(input_ids=ids, use_cache=False)[0]
        for rows, width in ((6, 20), (5, 17), (6, 24), (7, 23)):
            out = graphed(ids[:rows, :width])
            assert out.shape == (rows, width, model.config.hidden_size)
            torch.testing.assert_close(out, want[:rows, :width], atol=1e-5, rtol=1e-5)
        assert maker.shapes == [(8, 24)] and graphed.eager_calls == 0  # one bucket so far
        torch.testing.assert_close(graphed(ids[:2, :5]), want[:2, :5], atol=1e-5, rtol=1e-5)
        with pytest.warns(UserWarning, match=r"12 x 40 tokens .* past the 2 captured shapes"):
            out = graphed(ids)  # (12, 40): a third bucket, past the limit: eagerly
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert maker.shapes == [(8, 24), (4, 8)] and graphed.eager_calls == 1


def test_zero_grads_allocates_and_clears_only_what_trains():
    model = tiny_decoder("qwen2_gqa_bias")
    frozen = model.model.embed_tokens.weight
    frozen.requires_grad_(False)
    graphed = GraphedDecoder(model.model, PAD, make_graphed=static_buffer_graphs)
    layer = model.model.layers[0].mlp.up_proj.weight
    layer.grad = torch.ones_like(layer)
    graphed.zero_grads()
    assert frozen.grad is None
    assert all(p.grad is not None and not p.grad.any()
               for p in model.model.parameters() if p.requires_grad)


def test_zero_grads_keeps_the_decoder_gradients_and_drops_the_rest_of_the_model():
    """With the model, zero_grads replaces optimizer.zero_grad: the decoder's gradients are
    the same tensors step after step (zeroed in place, not allocated again), a parameter
    outside the decoder (an untied output layer) has its gradient dropped."""
    model = tiny_decoder("qwen2_gqa_bias")
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # untied
    graphed = GraphedDecoder(model.model, PAD, make_graphed=static_buffer_graphs)
    graphed.zero_grads(model)
    first = {n: p.grad for n, p in model.model.named_parameters()}
    for p in model.model.parameters():
        assert p.grad is not None
        p.grad.fill_(3.0)
    model.lm_head.weight.grad = torch.ones_like(model.lm_head.weight)
    graphed.zero_grads(model)
    assert model.lm_head.weight.grad is None
    for n, p in model.model.named_parameters():
        assert p.grad is first[n] and not p.grad.any()


def test_the_decoder_replaces_only_the_fused_head_forward():
    model = tiny_decoder("qwen2_gqa_bias")
    tokens, resp = _batch(model.config.vocab_size, 3)
    graphed = GraphedDecoder(model.model, PAD, make_graphed=static_buffer_graphs)
    with pytest.raises(ValueError, match="replaces the fused-head forward only"):
        response_log_probs(model, tokens, resp, 1.0, PAD, decoder=graphed, fused_head=False)
    with pytest.raises(ValueError, match="must replay the two passes"):
        response_log_probs(model, tokens, resp, 1.0, PAD, decoder=graphed.__call__,
                           fused_head=True, shared_prefix=True)


def test_the_bucket_budget_keeps_gradient_buffers_within_a_share_of_the_device():
    model = tiny_decoder("qwen2_gqa_bias")
    per = trainable_bytes(model.model)
    assert per == sum(p.numel() * 4 for p in model.model.parameters())  # float32
    assert graph_budget(model.model, per * 1000) == 8  # at most 8
    assert graph_budget(model.model, per * 8 * 3) == 3  # an eighth of the device: 3 sets
    assert graph_budget(model.model, per * 7) == 0  # not even one
    model.model.embed_tokens.weight.requires_grad_(False)  # frozen: no gradient buffer
    assert trainable_bytes(model.model) == per - model.model.embed_tokens.weight.numel() * 4


def test_a_capture_out_of_memory_releases_the_graphs_and_raises():
    """Qwen2-1.5B's anchor beside the engine's cache on an 80 GB H100: the second bucket's
    capture runs out of memory. The graphs end (the first bucket's too, so its pool goes
    back, and the failed warm-up's memory with it), the caller learns it, and every later
    call runs eagerly."""
    model = tiny_decoder("qwen2_gqa_bias").train()
    calls: list[tuple[int, ...]] = []
    held: list[weakref.ref] = []

    def maker(module, sample_args, pool=None, fuse_linears=True):
        calls.append(tuple(sample_args[0].shape))
        if len(calls) == 2:
            warm_up = torch.empty(1000)  # what the failed warm-up held
            held.append(weakref.ref(warm_up))
            error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 286.00 MiB.\nmore")
            raise error  # its traceback holds this frame, which holds it: a cycle
        return static_buffer_graphs(module, sample_args, pool)

    graphed = GraphedDecoder(model.model, PAD, row_multiple=4, width_multiple=8,
                             make_graphed=maker)
    graphed.zero_grads()
    ids = torch.randint(1, model.config.vocab_size, (3, 30))
    with torch.no_grad():
        want = model.model(input_ids=ids, use_cache=False)[0]
        graphed(ids[:2, :5])  # the first bucket, captured
        assert graphed.buckets == [(4, 8)]
        gc.disable()  # only the decoder's own collection may free the warm-up's memory
        try:
            with pytest.raises(CaptureOutOfMemory, match=(
                    r"at 4 x 32 tokens ran out of device memory \(CUDA out of memory\. Tried to "
                    r"allocate 286\.00 MiB\.\); the 1 graphs captured before \(4 x 8 tokens\)")):
                graphed(ids)
            assert held[0]() is None
        finally:
            gc.enable()
        assert graphed.buckets == [] and graphed.given_up
        torch.testing.assert_close(graphed(ids), want, atol=1e-5, rtol=1e-5)  # eagerly now
        torch.testing.assert_close(graphed(ids[:2, :5]), want[:2, :5], atol=1e-5, rtol=1e-5)
    assert len(calls) == 2 and graphed.eager_calls == 2


@pytest.mark.parametrize("free, ends", [(10_000, False), (999, True)], ids=["enough", "short"])
def test_a_capture_that_leaves_less_than_the_reserve_ends_the_graphs(free, ends):
    """Qwen2-1.5B's anchor on an 80 GB H100: the captures fit, and AdamW's first step then ran
    out of memory beside their pool (which keeps the activations' memory after the backward).
    A capture that leaves less free than ``reserve()`` asks ends the graphs as one out of
    memory does; one that leaves enough is kept. ``reserve`` is read after each capture (the
    optimizer's need shrinks once its states exist)."""
    model = tiny_decoder("qwen2_gqa_bias").train()
    asked: list[torch.device] = []

    def free_bytes(device: torch.device) -> int:
        asked.append(device)
        return free

    graphed = GraphedDecoder(model.model, PAD, row_multiple=4, width_multiple=8,
                             make_graphed=static_buffer_graphs, reserve=lambda: 1000,
                             free_bytes=free_bytes)
    graphed.zero_grads()
    ids = torch.randint(1, model.config.vocab_size, (3, 12))
    with torch.no_grad():
        want = model.model(input_ids=ids, use_cache=False)[0]
        if not ends:
            torch.testing.assert_close(graphed(ids), want, atol=1e-5, rtol=1e-5)
            assert graphed.buckets == [(4, 16)] and graphed.given_up is None
            return
        with pytest.raises(CaptureOutOfMemory, match=(
                r"at 4 x 16 tokens ran out of device memory \(the graphs' memory pool leaves "
                r"0\.0 GB free, under the 0\.0 GB the optimizer's step needs\); no graph is "
                r"kept")):
            graphed(ids)
        assert graphed.buckets == [] and graphed.given_up
        torch.testing.assert_close(graphed(ids), want, atol=1e-5, rtol=1e-5)  # eagerly now
    assert asked == [ids.device] and graphed.eager_calls == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compiled", [False, True], ids=["captured", "compiled-captured"])
def test_a_real_capture_gives_the_eager_gradients_on_a_gpu(compiled):
    """The capture itself (:func:`capture_accumulating`), with and without the trainer's
    compiler (``torch.compile(dynamic=False)``, inductor): two micro-batches of one bucket add
    up to the eager gradients (fp32, so the tolerance is rounding's)."""
    model = tiny_decoder("qwen2_gqa_bias").to("cuda").train()
    batches = [tuple(_batch(model.config.vocab_size, s)) for s in (5, 6)]
    batches = [([t.cuda() for t in tokens], resp) for tokens, resp in batches]
    for tokens, resp in batches:
        _loss(model, tokens, resp).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    compiler = (lambda m: torch.compile(m, dynamic=False)) if compiled else None
    graphed = GraphedDecoder(model.model, PAD, compiler=compiler)
    graphed.zero_grads(model)
    for tokens, resp in batches:
        _loss(model, tokens, resp, graphed).backward()
    assert len(graphed.buckets) >= 1 and graphed.eager_calls == 0
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], atol=1e-4, rtol=1e-4, msg=n)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_reserve_is_held_against_the_devices_free_memory_on_a_gpu():
    """A real capture, then the driver's free memory against ``reserve()``: a reserve of the
    whole device ends the graphs (eager from then), one of a byte keeps them."""
    model = tiny_decoder("qwen2_gqa_bias").to("cuda").train()
    ids = torch.randint(1, model.config.vocab_size, (3, 12), device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    for reserve, kept in ((1, True), (total, False)):
        graphed = GraphedDecoder(model.model, PAD, reserve=lambda r=reserve: r)
        graphed.zero_grads(model)
        if kept:
            graphed(ids).sum().backward()
            assert graphed.buckets == [(16, 16)] and graphed.given_up is None
            continue
        with pytest.raises(CaptureOutOfMemory, match=r"the optimizer's step needs\); no graph"):
            graphed(ids)
        assert graphed.buckets == [] and graphed.eager_calls == 0
        graphed(ids).sum().backward()  # eagerly
        assert graphed.eager_calls == 1
