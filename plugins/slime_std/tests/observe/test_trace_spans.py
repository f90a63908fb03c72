"""The tracer and the ``span`` API: tracks, nesting, errors, validity, the no-op path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from slime_core.observe import trace as tr
from slime_hookspecs import Sample
from slime_std.observe.trace_analysis import validate


@pytest.fixture
def tracer():
    t = tr.start()
    yield t
    tr.stop()


def _x(doc: dict, name: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == name]


def test_span_is_a_noop_without_a_tracer() -> None:
    tr.stop()
    with tr.span("turn", turn=1) as info:
        info["x"] = 2
    assert info == {"turn": 1, "x": 2} and tr.current() is None


def test_phases_nest_on_the_driver_track_and_write_valid_json(tracer, tmp_path: Path) -> None:
    tracer.open("train", "train", rollout_id=3)
    with tr.span("inner", k="v") as info:
        info["result"] = 7
    tracer.close("train", loss=0.5)
    assert not tracer.close("train")  # already closed
    path = tracer.write(tmp_path / "trace.json", run_dir="x")
    doc = json.loads(path.read_text())
    assert validate(doc) == []
    train, inner = _x(doc, "train")[0], _x(doc, "inner")[0]
    assert (train["pid"], train["tid"]) == (inner["pid"], inner["tid"]) == (tr.DRIVER_PID, tr.PHASE_TID)
    assert train["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= train["ts"] + train["dur"]
    assert train["args"] == {"rollout_id": 3, "loss": 0.5}
    assert inner["args"] == {"k": "v", "result": 7}
    names = {(e["name"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M"}
    assert ("process_name", "slime driver") in names and ("thread_name", "phases") in names
    assert doc["otherData"]["format"] == "slime.trace" and doc["otherData"]["run_dir"] == "x"


def test_sub_phases_follow_each_other_inside_train_only(tracer, tmp_path: Path) -> None:
    tr.sub_phase("advantages")  # no train phase open: nothing
    tracer.open(tr.TRAIN_PHASE, "train")
    tr.sub_phase("log_probs", role="ref")
    tr.sub_phase("advantages")  # where the core calls the estimator record
    tr.sub_phase("train_step", step_id=0)
    tr.sub_phase(None)
    tracer.close(tr.TRAIN_PHASE)
    doc = json.loads(tracer.write(tmp_path / "trace.json").read_text())
    assert validate(doc) == []
    names = [e["name"] for e in sorted(doc["traceEvents"], key=lambda e: e.get("ts", 0))
             if e["ph"] == "X" and e["name"] != "train"]
    assert names == ["log_probs", "advantages", "train_step"]
    (lp,), (adv,), (step,) = _x(doc, "log_probs"), _x(doc, "advantages"), _x(doc, "train_step")
    assert lp["ts"] + lp["dur"] <= adv["ts"] + 1e-3 and adv["ts"] + adv["dur"] <= step["ts"] + 1e-3
    assert lp["args"] == {"role": "ref"} and step["args"] == {"step_id": 0}


def test_concurrent_samples_get_their_own_lanes_and_turns_nest(tracer) -> None:
    tracer.start_rollout(5, evaluation=False)
    samples = [Sample(group_index=0, index=i) for i in range(3)]

    async def generate(s: Sample) -> None:
        with tr.sample_context(s):
            for turn in range(2):
                with tr.span("turn", turn=turn):
                    await asyncio.sleep(0.001)

    async def main() -> None:
        await asyncio.gather(*(generate(s) for s in samples))

    asyncio.run(main())
    with tr.span("reward", sample=samples[1]):
        pass
    doc = tracer.to_dict()
    turns = _x(doc, "turn")
    assert len(turns) == 6
    lanes = {s.index: tracer.sample_track(s) for s in samples}
    assert len(set(lanes.values())) == 3 and all(p == tr.SAMPLES_PID for p, _ in lanes.values())
    by_tid = {t: i for i, (_, t) in lanes.items()}
    for e in turns:  # a turn without an explicit sample landed on its sample's lane, named
        assert e["pid"] == tr.SAMPLES_PID
        assert e["args"]["index"] == by_tid[e["tid"]] and e["args"]["rollout_id"] == 5
    assert sorted(e["tid"] for e in turns) == sorted([t for _, t in lanes.values()] * 2)
    reward = _x(doc, "reward")[0]
    assert reward["tid"] == lanes[1][1]
    assert reward["args"] == {"rollout_id": 5, "group": 0, "index": 1, "eval": False}
    tracer.start_rollout(6, evaluation=True)  # the next rollout reuses lanes from 0
    assert tracer.sample_track(Sample(group_index=9, index=99)) == (tr.SAMPLES_PID, 1)
    assert validate(doc) == []


def test_an_exception_is_recorded_and_reraised(tracer) -> None:
    with pytest.raises(KeyError):
        with tr.span("reward", sample=Sample(index=4)):
            raise KeyError("boom")
    (ev,) = _x(tracer.to_dict(), "reward")
    assert ev["args"]["error"] == "KeyError: 'boom'"


def test_close_all_keeps_what_is_asked_and_closes_innermost_first(tracer) -> None:
    for key in ("run", "step", "train"):
        tracer.open(key, key)
    tracer.close_all(keep=("run",), error="E")
    assert tracer.is_open("run") and not tracer.is_open("train")
    assert [e["name"] for e in tracer.events] == ["train", "step"]
    assert all(e["args"] == {"error": "E"} for e in tracer.events)


def test_max_events_drops_sample_spans_but_keeps_phases() -> None:
    t = tr.start(max_events=2)
    try:
        for i in range(4):
            with tr.span("generate", sample=Sample(index=i)):
                pass
        t.open("save", "save")
        t.close("save")
        doc = t.to_dict()
        assert len(_x(doc, "generate")) == 2 and len(_x(doc, "save")) == 1
        assert doc["otherData"]["dropped_events"] == 2
    finally:
        tr.stop()


def test_a_plugin_track_is_named_capped_and_placed_by_perf_counter() -> None:
    import time

    t = tr.start(max_events=2)
    try:
        t.name_track(3, "engine", 1, "engine 0")
        t0 = time.perf_counter()
        for _ in range(3):  # the third is over max_events: counted, not kept
            t.add("generate", t.at(t0), t.at(t0 + 0.001), 3, 1, "engine")
        t.open("save", "save")
        t.close("save")
        doc = t.to_dict()
        assert validate(doc) == []
        meta = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
                if e["ph"] == "M"}
        assert meta[(3, 0)] == "engine" and meta[(3, 1)] == "engine 0"
        spans = _x(doc, "generate")
        assert len(spans) == 2 and doc["otherData"]["dropped_events"] == 1
        assert spans[0]["dur"] == pytest.approx(1000.0, abs=1e-2)  # 1 ms in microseconds
        assert len(_x(doc, "save")) == 1  # the driver's phases are always kept
    finally:
        tr.stop()


def test_samples_off_records_no_sample_spans() -> None:
    t = tr.start(samples=False)
    try:
        with tr.span("reward", sample=Sample(index=1)):
            pass
        with tr.sample_context(Sample(index=1)) as track:
            assert track is None
        assert t.events == []
    finally:
        tr.stop()


def test_validate_names_each_problem() -> None:
    assert validate([]) == ["top level must be an object with a 'traceEvents' list"]
    bad = {"traceEvents": [
        {"name": "a", "ph": "X", "ts": 1, "pid": 1, "tid": 1},  # no dur
        {"name": "b", "ph": "Q", "ts": 1, "dur": 1, "pid": 1, "tid": 1},
        {"name": "c", "ph": "X", "ts": -1, "dur": 1, "pid": "1", "tid": 1, "args": []},
    ]}
    problems = validate(bad)
    assert "traceEvents[0]: complete event needs dur >= 0" in problems
    assert "traceEvents[1]: unknown ph 'Q'" in problems
    assert {"traceEvents[2]: pid and tid must be integers",
            "traceEvents[2]: ts must be a number >= 0 (microseconds)",
            "traceEvents[2]: args must be an object"} <= set(problems)


def test_a_resumed_run_keeps_the_earlier_trace(tmp_path: Path) -> None:
    for segment in range(3):
        t = tr.Tracer()
        t.open("run", "run", segment=segment)
        t.close("run")
        tr.write_run_trace(t, tmp_path, status="completed")

    def segment_of(name: str) -> int:
        doc = json.loads((tmp_path / name).read_text())
        return [e for e in doc["traceEvents"] if e["ph"] == "X"][0]["args"]["segment"]

    assert [segment_of(n) for n in ("trace.1.json", "trace.2.json", "trace.json")] == [0, 1, 2]
