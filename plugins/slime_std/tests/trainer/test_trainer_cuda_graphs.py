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
    ({"compile": True}, "is not combined with train.compile"),
    ({"gradient_checkpointing": True}, "is not combined with train.gradient_checkpointing"),
    ({"fused_head": False}, "needs the fused head"),
], ids=["cpu", "compile", "checkpointing", "no-fused-head"])
def test_cuda_graphs_refuses_what_it_cannot_replay(tmp_path, train, why):
    with pytest.raises(ValueError, match=r"train\.cuda_graphs " + why.replace("(", r"\(")
                       .replace(")", r"\)")):
        _trainer(tmp_path, {"cuda_graphs": True, **train})


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
    _assert_same_steps(runs[False], runs[True], weight_atol=1e-6)
