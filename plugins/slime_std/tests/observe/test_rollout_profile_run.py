"""``profile.rollout`` in a tiny real run (local executor): the engine's phases land on the
``engine`` track of ``trace.json`` inside the driver's rollout and eval spans, add up to each
generate call, become ``perf/rollout_*`` / ``perf/eval_*`` metrics of every step, and
``core trace`` prints them against their floors; with the profile off none of it exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from slime_core.observe.trace import DRIVER_PID, PHASE_TID, ROLLOUT_TID
from slime_core.testing import TINY_QWEN2, write_char_tokenizer
from slime_std.engine.profile import ENGINE_PID
from slime_std.observe.commands import trace_command
from slime_std.observe.trace_analysis import validate

pytest.importorskip("slime_grpo")  # the run's advantage estimator

ARITH = Path(__file__).resolve().parents[4] / "examples" / "tiny_arith"
LEAVES = {"host", "kv_alloc", "prefill", "sample", "decode", "drop_rows"}
EPS = 5e-3  # microseconds: ts and dur are rounded to 1 ns each


def _run(tmp_path: Path, profile: dict[str, Any]) -> Path:
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    data = {
        "run": {"num_rollouts": 2, "run_dir": str(tmp_path / "run"), "progress": False,
                "loggers": ["jsonl"]},
        "model": {"tokenizer": str(write_char_tokenizer(tmp_path / "tok")),
                  "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl"), "eval_path": str(ARITH / "eval.jsonl")},
        "eval": {"interval": 1, "max_prompts": 2},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6},
        "train": {"lr": 1e-3},
        "profile": profile,
    }
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), None, (), data)
    return run_training(manager, config)


def _events(run_dir: Path) -> list[dict[str, Any]]:
    doc = json.loads((run_dir / "trace.json").read_text())
    assert validate(doc) == []
    return doc["traceEvents"]


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _inside(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    return (outer["ts"] - EPS <= inner["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + EPS)


def test_the_engine_profile_of_a_run_nests_adds_up_and_is_summarised(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, {"rollout": True, "peak_tflops": 0.5, "memory_gbps": 20.0})
    events = _events(run_dir)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names[(ENGINE_PID, 0)] == "engine" and names[(ENGINE_PID, 1)] == "engine 0"
    spans = [e for e in events if e["ph"] == "X"]
    engine = [e for e in spans if e["pid"] == ENGINE_PID]
    rollouts = [e for e in spans if (e["pid"], e["tid"], e["name"]) == (DRIVER_PID, ROLLOUT_TID,
                                                                          "rollout")]
    evals = [e for e in spans if (e["pid"], e["tid"], e["name"]) == (DRIVER_PID, PHASE_TID, "eval")]
    assert len(rollouts) == 2 and len(evals) == 3
    calls = [e for e in engine if e["name"] == "generate"]
    assert calls
    for call in calls:
        # a training call inside a rollout span, an evaluation's inside an eval span
        parents = evals if call["args"]["eval"] else rollouts
        assert sum(_inside(call, p) for p in parents) == 1, call
        inner = [e for e in engine if e is not call and _inside(e, call)]
        leaves = [e for e in inner if e["name"] in LEAVES]
        assert sum(e["dur"] for e in leaves) == pytest.approx(call["dur"], abs=len(leaves) * EPS)
        assert {"prefill", "sample", "decode"} <= {e["name"] for e in leaves}
        steps = [e for e in inner if e["name"] == "decode_step"]
        assert 1 <= len(steps) <= 6  # one per new token of the call's longest row
        assert [e["args"]["step"] for e in steps] == list(range(len(steps)))
    for rollout in rollouts:  # the engine's calls fit in their rollout
        inside = [c for c in calls if _inside(c, rollout)]
        assert inside and sum(c["dur"] for c in inside) <= rollout["dur"] + EPS

    rows = _metrics(run_dir)
    train_rows = [r for r in rows if "perf/rollout_time" in r]
    assert len(train_rows) == 2
    for r in train_rows:
        phases = sum(r[f"perf/rollout_{p}_s"] for p in ("prefill", "decode", "sample",
                                                         "host_gap"))
        phases += r.get("perf/rollout_kv_alloc_s", 0.0) + r.get("perf/rollout_drop_rows_s", 0.0)
        assert phases == pytest.approx(r["perf/rollout_engine_s"], rel=1e-6)
        assert r["perf/rollout_engine_s"] <= r["perf/rollout_time"]
        assert 1 <= r["perf/rollout_decode_steps"] <= 6 and r["perf/rollout_floor_s"] > 0
        assert r["perf/eval_engine_s"] <= r["perf/eval_time"]
    assert rows[0]["perf/eval_decode_steps"] >= 1  # the evaluation before the first step

    out = CliRunner().invoke(trace_command, [str(run_dir)])
    assert out.exit_code == 0, out.output
    assert "engine phases (profile.rollout; floors are estimates against 0.5 TFLOP/s and " \
           "20 GB/s (configured))" in out.output
    for label in ("train generate", "train   prefill", "train   decode ", "train   host gap",
                  "eval  generate", "weight_update", "x floor"):
        assert label in out.output, label
    data = json.loads(CliRunner().invoke(trace_command, [str(run_dir), "--json"]).output)
    kinds = {(p["kind"], p["name"]) for p in data["engine"]["phases"]}
    assert {("train", "prefill"), ("eval", "decode"), ("-", "weight_update")} <= kinds


def test_without_the_profile_nothing_of_it_is_written(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, {})
    assert not [e for e in _events(run_dir) if e["pid"] == ENGINE_PID]
    for row in _metrics(run_dir):
        assert not [k for k in row if k.startswith("perf/rollout_") and k.endswith(
            ("_prefill_s", "_decode_s", "_host_gap_s", "_engine_s"))]
        assert "perf/eval_engine_s" not in row
    out = CliRunner().invoke(trace_command, [str(run_dir)])
    assert out.exit_code == 0 and "engine phases" not in out.output
