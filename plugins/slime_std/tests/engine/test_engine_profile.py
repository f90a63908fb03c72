"""``profile.rollout``: the local engine's phases per generate call, on every decode path.

What is checked: the phases tile each call (contiguous, from its start to its end), one
``decode_step`` per new token holds its ``sample`` / ``host`` / ``decode``, floors come with
the work that has them, outputs are those of an engine without the profile, and an engine
without it records nothing. Durations are never compared with a wall clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.observe import trace as tr
from slime_core.testing import build_test_config
from slime_hookspecs import ConfigSection, SamplingParams
from slime_std.engine import profile as engine_profile
from slime_std.engine.floors import calibrate, model_cost
from slime_std.engine.local_engine import LocalEngine
from slime_std.engine.static_decode import StaticDecoders
from slime_std.observe.config import ProfileSection

from .conftest import TINY_QWEN2
from .test_engine_generate import PROMPTS

LEAVES = {"host", "kv_alloc", "prefill", "sample", "decode", "drop_rows"}
RATES = {"rollout": True, "peak_tflops": 0.5, "memory_gbps": 20.0}  # configured: no calibration
EPS = 5e-3  # microseconds: ts and dur are rounded to 1 ns each


@pytest.fixture
def tracer() -> Iterator[tr.Tracer]:
    engine_profile.drain(False), engine_profile.drain(True)  # totals of earlier tests
    yield tr.start()
    tr.stop()
    engine_profile.set_evaluating(False)


def _engine(tokenizer_dir: Path, profile: dict[str, Any] | None = None,
            **sections: dict[str, Any]) -> LocalEngine:
    config = build_test_config(
        ConfigSection(name="profile", schema=ProfileSection),
        model={"init_config": dict(TINY_QWEN2), "tokenizer": str(tokenizer_dir)},
        profile=profile or {}, **sections)
    return LocalEngine(config, 0, None)


def _params() -> list[SamplingParams]:
    # half the rows stop after 3 tokens: the dynamic paths drop them mid-call
    return [SamplingParams(temperature=1.0, max_new_tokens=3 if i % 2 else 9, seed=7,
                           ignore_eos=True) for i in range(len(PROMPTS))]


def _engine_spans(tracer: tr.Tracer) -> list[dict[str, Any]]:
    doc = tracer.to_dict()
    return sorted((e for e in doc["traceEvents"] if e["pid"] == engine_profile.ENGINE_PID
                   and e["ph"] == "X"), key=lambda e: (e["ts"], -e["dur"]))


def _inside(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    return (outer["ts"] - EPS <= inner["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + EPS)


@pytest.mark.parametrize("path", ["fused", "transformers", "static"])
def test_profiled_generate_tiles_its_phases_and_keeps_its_outputs(
        tracer: tr.Tracer, tokenizer_dir: Path, path: str) -> None:
    rollout = {"fused_decoder": path != "transformers"}
    plain = _engine(tokenizer_dir, rollout=rollout)
    engine = _engine(tokenizer_dir, RATES, rollout=rollout)
    if path == "static":  # the CUDA-graph path, run eagerly (as its own tests do)
        plain._static = StaticDecoders(capture=False)
        engine._static = StaticDecoders(capture=False)
    want = plain.generate(PROMPTS, _params())
    got = engine.generate(PROMPTS, _params())
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.log_probs for o in got] == [o.log_probs for o in want]

    spans = _engine_spans(tracer)
    doc_meta = [e for e in tracer.to_dict()["traceEvents"] if e["ph"] == "M"
                and e["pid"] == engine_profile.ENGINE_PID]
    assert {e["args"]["name"] for e in doc_meta} == {"engine", "engine 0"}
    assert spans[0]["name"] == "weight_load"  # the start-up load, before any call
    (call,) = [e for e in spans if e["name"] == "generate"]
    assert call["args"]["rows"] == len(PROMPTS) and call["args"]["floors"] == "configured"
    assert call["args"]["new_tokens"] == sum(len(o.token_ids) for o in got)
    inner = [e for e in spans if e is not call and _inside(e, call)]
    leaves = [e for e in inner if e["name"] in LEAVES]
    assert {e["name"] for e in leaves} >= {"host", "kv_alloc", "prefill", "sample", "decode"}
    # contiguous from the call's start to its end: the phases add up to the call
    assert leaves[0]["ts"] == pytest.approx(call["ts"], abs=EPS)
    for before, after in itertools.pairwise(leaves):
        assert after["ts"] == pytest.approx(before["ts"] + before["dur"], abs=EPS)
    end = leaves[-1]["ts"] + leaves[-1]["dur"]
    assert end == pytest.approx(call["ts"] + call["dur"], abs=EPS)
    assert sum(e["dur"] for e in leaves) == pytest.approx(call["dur"], abs=len(leaves) * EPS)
    # one step per new token of the longest row; each holds its sample, host and decode
    steps = [e for e in inner if e["name"] == "decode_step"]
    assert [e["args"]["step"] for e in steps] == list(range(9))
    for e in leaves:
        if e["name"] in ("sample", "decode", "drop_rows"):
            assert sum(_inside(e, s) for s in steps) == 1, e
    last = [e["name"] for e in leaves if _inside(e, steps[-1])]
    # the last token is sampled and no forward follows it, on both paths (the static path asks
    # whether rows run only every 8 steps, but the last step needs no asking)
    assert last == ["sample", "host"]
    assert sum(e["name"] == "decode" for e in leaves) == 8
    # rows dropped when half of them finished (never on the static path's fixed batch)
    assert any(e["name"] == "drop_rows" for e in leaves) is (path != "static")
    for e in leaves:
        if e["name"] in ("prefill", "decode", "sample"):
            assert e["args"]["bytes"] > 0 and e["args"]["floor_s"] > 0
    metrics = engine_profile.drain(evaluation=False)
    assert metrics["perf/rollout_decode_steps"] == 9
    phases = ("prefill", "decode", "sample", "host_gap", "kv_alloc", "drop_rows")
    assert sum(metrics.get(f"perf/rollout_{p}_s", 0.0) for p in phases) == pytest.approx(
        metrics["perf/rollout_engine_s"], rel=1e-6)
    assert engine_profile.drain(evaluation=False) == {}  # drained


def test_weight_updates_and_evaluations_are_recorded_apart(tracer: tr.Tracer,
                                                          tokenizer_dir: Path) -> None:
    engine = _engine(tokenizer_dir, RATES)
    engine.update_weights(engine.state_dict(), version=1)
    engine_profile.set_evaluating(True)
    engine.generate(PROMPTS[:2], _params()[:2])
    engine_profile.set_evaluating(False)
    (update,) = [e for e in _engine_spans(tracer) if e["name"] == "weight_update"]
    assert update["args"]["version"] == 1 and update["args"]["bytes"] > 0
    (call,) = [e for e in _engine_spans(tracer) if e["name"] == "generate"]
    assert call["args"]["eval"] is True
    train, evaluation = engine_profile.drain(False), engine_profile.drain(True)
    assert set(train) >= {"perf/rollout_weight_update_s"}
    assert train["perf/rollout_engine_s"] == 0.0  # no training generate call happened
    assert evaluation["perf/eval_engine_s"] > 0 and "perf/eval_decode_s" in evaluation


def test_profile_off_records_nothing(tracer: tr.Tracer, tokenizer_dir: Path) -> None:
    engine = _engine(tokenizer_dir)
    assert engine._profile is None
    engine.generate(PROMPTS, _params())
    engine.update_weights(engine.state_dict(), version=1)
    assert _engine_spans(tracer) == []
    assert engine_profile.drain(False) == {} and engine_profile.drain(True) == {}


def test_other_executors_are_not_profiled(tracer: tr.Tracer, tokenizer_dir: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # under Ray the engine runs in an actor whose spans and totals no one collects
    engine = _engine(tokenizer_dir, RATES, run={"executor": "ray"})
    assert engine._profile is None
    assert "local executor only" in capsys.readouterr().err


def test_model_cost_counts_the_tiny_model_by_hand(tokenizer_dir: Path) -> None:
    model = _engine(tokenizer_dir)._model
    cost = model_cost(model, torch.float32)
    assert cost is not None
    hidden, vocab, layers, heads, kv_heads, head_dim = 32, 64, 2, 4, 2, 8
    total = sum(p.numel() for p in model.parameters()) * 4
    assert cost.weight_bytes == total  # tied head: the embedding is read as the output head
    assert cost.head_params == vocab * hidden and cost.vocab == vocab
    assert cost.kv_bytes_per_token == layers * 2 * kv_heads * head_dim * 4
    assert cost.attn_flops_per_pair == 4 * layers * heads * head_dim
    nbytes, flops = cost.decode(rows=3, context=10)
    assert nbytes == total + 3 * 10 * cost.kv_bytes_per_token
    assert flops == 2 * (cost.layer_params + vocab * hidden) * 3 + cost.attn_flops_per_pair * 30
    # three rows, two of them sharing a prompt of 4 tokens: 2 prompts to compute
    nbytes, flops = cost.prefill(lengths=[4, 4, 3], distinct=[4, 3])
    assert nbytes == total + 11 * cost.kv_bytes_per_token
    assert flops == (2 * cost.layer_params * 7 + 2 * vocab * hidden * 2
                     + cost.attn_flops_per_pair * (4 * 5 / 2 + 3 * 4 / 2))
    # their first 2 tokens common (rollout.common_prefix): computed once; each prompt's rest
    # (2 and 1 tokens) attends to them and to itself
    nbytes, flops = cost.prefill(lengths=[4, 4, 3], distinct=[4, 3], prefix=2)
    assert nbytes == total + 11 * cost.kv_bytes_per_token
    assert flops == (2 * cost.layer_params * 5 + 2 * vocab * hidden * 2
                     + cost.attn_flops_per_pair * (2 * 3 / 2 + (2 * 2 + 2 * 3 / 2)
                                                   + (1 * 2 + 1 * 2 / 2)))


def test_calibrate_measures_positive_rates() -> None:
    peak, bandwidth = calibrate(torch.device("cpu"), torch.float32, size=64,
                                buffer_bytes=1 << 16, reps=1)
    assert peak > 0 and bandwidth > 0
