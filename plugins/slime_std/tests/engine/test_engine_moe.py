"""Mixture-of-experts models through the ``local`` engine and the trainer's log-probs: the
engine's log-probs equal the trainer forward's (with and without routing replay), and with
``train.routing_replay = "rollout"`` the engine records every token's experts (prompt
included, the last token excepted), as a full forward of the finished sequence routes them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from slime_core.moe.routing import from_record
from slime_core.testing import TINY_OLMOE, TINY_QWEN2, TINY_QWEN3_MOE
from slime_core.trainkit.batching import response_log_probs
from slime_hookspecs import SamplingParams
from slime_std.engine.local_engine import LocalEngine

FAMILIES = {"qwen3_moe": TINY_QWEN3_MOE, "olmoe": TINY_OLMOE}
PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [5, 6, 7, 8, 9], [20], [30, 31]]


def _engine(make_config: Any, tokenizer: Any, family: str, replay: str) -> LocalEngine:
    config = make_config(
        model={"init_config": dict(FAMILIES[family], initializer_range=0.2),
               "tokenizer": str(tokenizer)},
        train={"routing_replay": replay})
    return LocalEngine(config)


def _generate(engine: LocalEngine) -> list[Any]:
    # different lengths: rows finish early and are dropped from the batch mid-decode
    lengths = [12, 3, 12, 9, 2]
    params = [SamplingParams(temperature=1.0, max_new_tokens=n, ignore_eos=True, seed=i)
              for i, n in enumerate(lengths)]
    return engine.generate(PROMPTS, params)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_engine_records_every_tokens_experts(make_config, tiny_tokenizer_dir, family):
    engine = _engine(make_config, tiny_tokenizer_dir, family, "rollout")
    outs = _generate(engine)
    control = engine._routing
    assert control is not None and engine.fused_unsupported is not None
    for prompt, out in zip(PROMPTS, outs, strict=True):
        record = out.routed_experts
        assert record is not None and record.dtype == "uint8"
        seq = prompt + out.token_ids
        assert record.shape == (len(seq) - 1, 2, 2)
        with torch.no_grad(), control.recording():
            engine._model(input_ids=torch.tensor([seq]))
            full = control.take()
        # the cached, left-padded, row-dropping decode routed as one full forward does
        assert torch.equal(from_record(record).long(), full[:-1].long())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_engine_log_probs_equal_the_trainer_forward(make_config, tiny_tokenizer_dir, family):
    engine = _engine(make_config, tiny_tokenizer_dir, family, "rollout")
    outs = _generate(engine)
    seqs = [torch.tensor(p + o.token_ids) for p, o in zip(PROMPTS, outs, strict=True)]
    resp = [len(o.token_ids) for o in outs]
    routes = [from_record(o.routed_experts) for o in outs]
    with torch.no_grad():
        off, _ = response_log_probs(engine._model, seqs, resp, 1.0, 0)
        on, _ = response_log_probs(engine._model, seqs, resp, 1.0, 0,
                                   routing=engine._routing, routes=routes)
    for out, a, b in zip(outs, off, on, strict=True):
        torch.testing.assert_close(a, torch.tensor(out.log_probs), atol=2e-5, rtol=0)
        torch.testing.assert_close(b, torch.tensor(out.log_probs), atol=2e-5, rtol=0)


def test_no_record_without_replay(make_config, tiny_tokenizer_dir):
    engine = _engine(make_config, tiny_tokenizer_dir, "qwen3_moe", "off")
    assert engine._routing is None
    assert all(o.routed_experts is None for o in _generate(engine))


def test_replay_of_a_dense_model_fails_at_engine_start(make_config, tiny_tokenizer_dir):
    config = make_config(model={"init_config": dict(TINY_QWEN2),
                                "tokenizer": str(tiny_tokenizer_dir)},
                         train={"routing_replay": "rollout"})
    with pytest.raises(ValueError, match="no mixture-of-experts router"):
        LocalEngine(config)
