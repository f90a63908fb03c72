"""``train.cuda_graphs`` in the ``torch`` trainer. On the CPU: the settings it refuses, with the
key named, and two GRPO steps of several micro-batches through a :class:`GraphedDecoder`
whose capture is :func:`slime_core.testing.static_buffer_graphs` (replay semantics: reused
output and gradient buffers) giving the one-pass forward's losses and weights. The capture
on a GPU: ``bench/train_graphs.py``."""

from __future__ import annotations

import pytest

from .test_trainer_shared_prefix import _assert_same_steps, _group_batch, _trainer, _two_steps


@pytest.mark.parametrize("train, why", [
    ({}, "needs a CUDA device (the trainer is on cpu)"),
    ({"gradient_checkpointing": True}, "is not combined with train.gradient_checkpointing"),
    ({"fused_head": False}, "needs train.fused_head = true"),
], ids=["cpu", "checkpointing", "no-fused-head"])
def test_cuda_graphs_refuses_what_it_cannot_replay(tmp_path, train, why):
    with pytest.raises(ValueError, match=r"train\.cuda_graphs " + why.replace("(", r"\(")
                       .replace(")", r"\)")):
        _trainer(tmp_path, {"cuda_graphs": True, **train})


@pytest.mark.parametrize("model, memory_gb, warning", [
    ("dense", 80, None),
    ("moe", 80, r"a mixture-of-experts model"),
    ("dense", 1e-6, r"one captured shape would keep 0\.0 GB of gradient buffers, over 1/8 of "
                    r"the device's 0 GB"),
], ids=["dense", "moe", "too-little-memory"])
def test_a_model_the_graphs_do_not_apply_to_trains_eagerly(tmp_path, monkeypatch, model,
                                                           memory_gb, warning):
    """Past the setting checks, the model decides: a mixture of experts (routing that syncs
    with the host), or one whose gradient buffers for a single captured shape would take over
    an eighth of the device, trains eagerly with a warning. The device is pretended (a CUDA
    trainer, a device of ``memory_gb``); nothing is captured until a forward."""
    import types

    import torch
    from slime_core.testing import TINY_QWEN3_MOE

    trainer = _trainer(tmp_path, {"cuda_graphs": False}, **(
        {"model": {"init_config": TINY_QWEN3_MOE}} if model == "moe" else {}))
    trainer.config.train.cuda_graphs = True
    monkeypatch.setattr(trainer, "device", torch.device("cuda"))
    props = types.SimpleNamespace(total_memory=int(memory_gb * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    if warning is None:
        graphed = trainer._graphed_decoder()
        assert graphed.decoder is trainer.model.model and graphed.max_graphs == 8
    else:
        with pytest.warns(UserWarning, match=r"train\.cuda_graphs: not for this model \(" + warning):
            assert trainer._graphed_decoder() is None


@pytest.mark.parametrize("model", ["dense", "moe"])
def test_compile_with_graphs_compiles_each_bucket_or_else_in_place(tmp_path, monkeypatch, model):
    """``train.compile`` beside ``train.cuda_graphs``: where the graphs apply, the decoder is
    not compiled in place (dynamic shapes) but each bucket at its own shape before its
    capture; where they do not (a mixture of experts), it is compiled in place as without
    graphs. The device is pretended, as above."""
    import types

    import torch
    from slime_core.testing import TINY_QWEN3_MOE
    from slime_std.trainer.torch_trainer import _compile_static

    trainer = _trainer(tmp_path, {"cuda_graphs": False}, **(
        {"model": {"init_config": TINY_QWEN3_MOE}} if model == "moe" else {}))
    trainer.config.train.cuda_graphs = trainer.config.train.compile = True
    monkeypatch.setattr(trainer, "device", torch.device("cuda"))
    props = types.SimpleNamespace(total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    decoder = trainer.model.model
    if model == "dense":
        assert trainer._graphed_decoder().compiler is _compile_static
        assert getattr(decoder, "_compiled_call_impl", None) is None
    else:
        with pytest.warns(UserWarning, match="a mixture-of-experts model"):
            assert trainer._graphed_decoder() is None
        assert getattr(decoder, "_compiled_call_impl", None) is not None


def test_auto_left_unresolved_stays_off(tmp_path):
    """A config that did not go through slime_configure keeps ``auto``: eager (the CPU
    resolution itself: ``plugins/slime_std/tests/test_fast_path.py``)."""
    assert _trainer(tmp_path, {"cuda_graphs": "auto"}).graphed is None


def test_graphed_steps_match_the_one_pass_forward(tmp_path):
    from slime_core.api import GraphedDecoder
    from slime_core.testing import static_buffer_graphs

    runs = {}
    for graphed in (False, True):
        trainer = _trainer(tmp_path / str(graphed), {"shared_prefix": False})
        if graphed:  # what train.cuda_graphs builds on CUDA, with the CPU stand-in capture
            trainer.graphed = GraphedDecoder(trainer.model.model, trainer.pad_id,
                                             make_graphed=static_buffer_graphs)
        runs[graphed] = _two_steps(tmp_path, {}, trainer)
    graphed = runs[True][2].graphed
    assert graphed.buckets == [(16, 16)] and graphed.eager_calls == 0
    assert len(runs[True][2]._plan(_group_batch(0).tokens, _group_batch(0).response_lengths,
                                   False)) > 1  # several micro-batches through one bucket
    # one element of a near-zero gradient, scaled up by AdamW's normalisation: 1.3e-6 apart
    # on an AMD EPYC (the rest within 1.2e-7)
    _assert_same_steps(runs[False], runs[True], weight_atol=5e-6)


def test_the_plan_cuts_micro_batches_at_the_graphs_row_bucket(tmp_path):
    """A graph pads a micro-batch's rows up to its row bucket: under the graphs the plan cuts
    at multiples of it (the last takes what is left), eagerly it cuts evenly."""
    from slime_core.api import GraphedDecoder
    from slime_core.testing import static_buffer_graphs

    trainer = _trainer(tmp_path, {"shared_prefix": False, "micro_batch_tokens": 60})
    batch = _group_batch(0)  # 6 samples of 8-15 tokens
    eager = [len(mb) for mb in trainer._plan(batch.tokens, batch.response_lengths, False)]
    trainer.graphed = GraphedDecoder(trainer.model.model, trainer.pad_id, row_multiple=2,
                                     make_graphed=static_buffer_graphs)
    graphed = [len(mb) for mb in trainer._plan(batch.tokens, batch.response_lengths, False)]
    assert (eager, graphed) == ([3, 3], [4, 2])  # padded to 4 + 4 rows against 4 + 2


def test_graphed_shared_prefix_steps_match_the_eager_ones(tmp_path):
    """With ``train.shared_prefix`` the graphs replay the two passes (the prompt once per
    group): the same steps as the eager shared-prefix trainer's."""
    from slime_core.api import GraphedDecoder
    from slime_core.testing import static_buffer_graphs

    runs = {}
    for graphed in (False, True):
        trainer = _trainer(tmp_path / str(graphed), {})
        if graphed:
            trainer.graphed = GraphedDecoder(trainer.model.model, trainer.pad_id,
                                             make_graphed=static_buffer_graphs)
        runs[graphed] = _two_steps(tmp_path, {}, trainer)
    graphed = runs[True][2].graphed
    # (a micro-batch whose prompts all differ runs the one-pass forward)
    assert any(b[0] == "prefix" for b in graphed.buckets)
    assert graphed.eager_calls == 0
    _assert_same_steps(runs[False], runs[True], weight_atol=5e-6)


def test_a_capture_out_of_memory_redoes_the_step_without_graphs(tmp_path):
    """The 1.5B anchor on an 80 GB H100: a capture ran out of memory, and the one-pass forward
    did not fit eagerly either. The trainer drops the graphs, says so, and redoes the optimizer
    step in the form it has without them (the shared-prefix plan here). The second bucket's
    capture fails, after the first micro-batch's backward through the first: the redone step
    starts from zero gradients, and both steps equal an eager trainer's."""
    import torch
    from slime_core.api import GraphedDecoder
    from slime_core.testing import static_buffer_graphs

    calls = []

    def second_out_of_memory(module, sample_args, pool=None, fuse_linears=True):
        calls.append(tuple(sample_args[0].shape))
        if len(calls) == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 286.00 MiB.")
        return static_buffer_graphs(module, sample_args, pool)

    runs = {False: _two_steps(tmp_path / "eager", {})}
    trainer = _trainer(tmp_path / "graphed", {})
    trainer.graphed = GraphedDecoder(trainer.model.model, trainer.pad_id, row_multiple=1,
                                     width_multiple=1, make_graphed=second_out_of_memory)
    with pytest.warns(UserWarning, match=r"at \d+ x \d+ (prompt and \d+ x \d+ response )?"
                                         r"tokens (\(shared prefix\) )?ran out of device memory .*; "
                                         r"this run trains without them from here \(this "
                                         r"optimizer step is redone\)"):
        runs[True] = _two_steps(tmp_path, {}, trainer)
    assert trainer.graphed is None and len(calls) == 2 and calls[0] != calls[1]
    _assert_same_steps(runs[False], runs[True], weight_atol=1e-6)


def test_a_capture_short_of_the_optimizers_memory_redoes_the_step_without_graphs(tmp_path):
    """The 1.5B anchor on an 80 GB H100 again: the captures fit, and AdamW's first step ran
    out of memory beside their pool. The trainer's graphs reserve what its optimizer's next
    step allocates (``optimizer_step_bytes``: its temporaries; ``make_adamw`` made the moment
    buffers before any capture); a capture leaving less ends the graphs before any step ran,
    and the step is redone eagerly, equal to an eager trainer's."""
    import torch
    from slime_core.api import GraphedDecoder, optimizer_step_bytes
    from slime_core.testing import static_buffer_graphs

    runs = {False: _two_steps(tmp_path / "eager", {})}
    trainer = _trainer(tmp_path / "graphed", {})
    need = optimizer_step_bytes(trainer.optimizer)
    params = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
    assert need == params  # fp32: a multi-tensor temporary (the moments exist already)
    reserved = []

    def reserve() -> int:
        reserved.append(optimizer_step_bytes(trainer.optimizer))
        return reserved[-1]

    trainer.graphed = GraphedDecoder(trainer.model.model, trainer.pad_id,
                                     make_graphed=static_buffer_graphs, reserve=reserve,
                                     free_bytes=lambda device: need - 1)
    with pytest.warns(UserWarning, match=r"ran out of device memory \(the graphs' memory pool "
                                         r"leaves .* GB the optimizer's step needs\); no graph is "
                                         r"kept; this run trains without them from here"):
        runs[True] = _two_steps(tmp_path, {}, trainer)
    assert trainer.graphed is None and reserved == [need]
    _assert_same_steps(runs[False], runs[True], weight_atol=1e-6)


def test_the_trainers_graphs_reserve_the_optimizers_step(tmp_path, monkeypatch):
    """``_graphed_decoder`` hands its graphs the trainer's optimizer's next-step bytes."""
    import types

    import torch
    from slime_core.api import optimizer_step_bytes

    trainer = _trainer(tmp_path, {"cuda_graphs": False})
    trainer.config.train.cuda_graphs = True
    monkeypatch.setattr(trainer, "device", torch.device("cuda"))
    props = types.SimpleNamespace(total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    graphed = trainer._graphed_decoder()
    assert graphed.reserve() == optimizer_step_bytes(trainer.optimizer) > 0


def test_no_micro_batch_graph_lives_into_the_next_forward(tmp_path, monkeypatch):
    """A micro-batch's loss and its autograd graph are gone when the next one's
    forward begins: a graph still alive keeps the parameters' gradient accumulators of the
    eager pass, and a capture of a new bucket reusing them orders the default stream after
    the capture (a CUDA error on an H100: the 0.5B anchor's second bucket)."""
    import weakref

    from slime_std.trainer import torch_trainer

    trainer = _trainer(tmp_path, {"shared_prefix": False})
    assert len(trainer._plan(_group_batch(0).tokens, _group_batch(0).response_lengths,
                             False)) > 1
    alive: list[weakref.ref] = []
    forwards = []
    real_forward, real_loss = torch_trainer.response_log_probs, torch_trainer.compute_loss

    def forward(*args, **kwargs):
        forwards.append(sum(r() is not None for r in alive))
        return real_forward(*args, **kwargs)

    def loss(config, mb, lps, ents):
        out = real_loss(config, mb, lps, ents)
        alive.append(weakref.ref(out[0]))  # the loss: its graph holds the whole pass
        return out

    monkeypatch.setattr(torch_trainer, "response_log_probs", forward)
    monkeypatch.setattr(torch_trainer, "compute_loss", loss)
    _two_steps(tmp_path, {}, trainer)
    assert len(forwards) > 2 and forwards == [0] * len(forwards)
