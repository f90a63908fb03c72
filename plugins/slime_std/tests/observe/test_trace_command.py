"""``core trace``: phase breakdown from the nesting, slowest samples, errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from slime_core.cli.main import cli
from slime_core.observe.trace import DRIVER_PID, PHASE_TID, ROLLOUT_TID, SAMPLES_PID
from slime_std.observe.commands import trace_command
from slime_std.observe.trace_analysis import format_summary, summarize


def _x(name: str, ts: float, dur: float, pid: int = DRIVER_PID, tid: int = PHASE_TID, **args):
    return {"name": name, "ph": "X", "ts": ts * 1e6, "dur": dur * 1e6, "pid": pid, "tid": tid,
            "cat": "phase", "args": args}


def _doc() -> dict:
    """setup 0-2 (weight_sync 1-1.5); run 2-10: step 2-6 (rollout 2-3, train 3-5 with
    log_probs[ref] 3-3.5 and train_step 3.5-5, weight_sync 5-5.5), step 6-10 (rollout 6-7,
    train 7-9 with train_step 7-9, eval 9-9.5)."""
    ev = [
        _x("setup", 0, 2), _x("weight_sync", 1, 0.5), _x("run", 2, 8),
        _x("step", 2, 4), _x("rollout", 2, 1, tid=ROLLOUT_TID), _x("train", 3, 2),
        _x("log_probs", 3, 0.5, role="ref"), _x("train_step", 3.5, 1.5), _x("weight_sync", 5, 0.5),
        _x("step", 6, 4), _x("rollout", 6, 1, tid=ROLLOUT_TID), _x("train", 7, 2),
        _x("train_step", 7, 2),
        _x("eval", 9, 0.5),
    ]
    for i, (gen, rew) in enumerate([(0.9, 0.05), (0.4, 0.01), (0.7, 0.2)]):
        args = {"rollout_id": 0, "group": 0, "index": i, "eval": False, "status": "completed",
                "response_length": 10 + i}
        ev.append(_x("generate", 2, gen, SAMPLES_PID, i + 1, **args))
        ident = {k: args[k] for k in ("rollout_id", "group", "index", "eval")}
        ev.append(_x("turn", 2, gen / 2, SAMPLES_PID, i + 1, turn=0, **ident))
        ev.append(_x("reward", 2 + gen, rew, SAMPLES_PID, i + 1, **ident))
    return {"traceEvents": ev, "otherData": {"status": "completed", "dropped_events": 0}}


def test_breakdown_follows_nesting_and_skips_containers() -> None:
    s = summarize(_doc())
    assert abs(s.wall_s - 10) < 1e-9
    got = {r.path: (round(r.total_s, 6), r.count) for r in s.phases}
    assert got == {
        ("setup",): (2, 1), ("setup", "weight_sync"): (0.5, 1),
        ("rollout",): (2, 2), ("train",): (4, 2),
        ("train", "log_probs[ref]"): (0.5, 1), ("train", "train_step"): (3.5, 2),
        ("weight_sync",): (0.5, 1), ("eval",): (0.5, 1),
    }
    # parents before their children, siblings in order of their first span (across tracks)
    order = [r.path for r in s.phases]
    assert order == [("setup",), ("setup", "weight_sync"), ("rollout",), ("train",),
                     ("train", "log_probs[ref]"), ("train", "train_step"), ("weight_sync",),
                     ("eval",)]
    slow = sorted(s.samples, key=lambda r: -(r.generate_s + r.reward_s))
    assert [r.index for r in slow] == [0, 2, 1] and slow[0].turns == 1
    text = format_summary(s, top=2)
    table = {ln.split()[0]: ln.split()[1:] for ln in
             text.split("phase breakdown")[1].split("samples:")[0].splitlines()[2:] if ln.strip()}
    assert table["train"] == ["4.000", "40.0%", "2", "2.0000"]
    assert table["log_probs[ref]"][:2] == ["0.500", "5.0%"]
    assert table["(other)"] == ["1.000", "10.0%"]  # 10 - (2 + 2 + 4 + 0.5 + 0.5)
    assert "\n    log_probs[ref]" in text and "\n  train " in text  # indented under train
    rows = text.split("slowest samples")[1].splitlines()[2:]
    assert len(rows) == 2 and rows[0].split()[:4] == ["0", "train", "0", "0"]


def test_core_trace_command_prints_and_emits_json(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text(json.dumps(_doc()))
    res = CliRunner().invoke(trace_command, [str(tmp_path), "--top", "1"])
    assert res.exit_code == 0, res.output
    assert "phase breakdown" in res.output and "slowest samples (generate + reward), top 1" in res.output
    res = CliRunner().invoke(trace_command, [str(tmp_path), "--json"])
    data = json.loads(res.output)
    assert data["num_samples"] == 3 and data["phases"][0]["path"] == ["setup"]


def test_core_trace_errors_are_clear(tmp_path: Path) -> None:
    res = CliRunner().invoke(trace_command, [str(tmp_path)])
    assert res.exit_code == 1 and "the run wrote no trace" in res.output
    (tmp_path / "trace.json").write_text('{"traceEvents": [{"ph": "X"}]}')
    res = CliRunner().invoke(trace_command, [str(tmp_path)])
    assert res.exit_code == 1 and "not a valid Chrome trace" in res.output


def test_trace_and_report_are_registered_through_the_hook() -> None:
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    manager = SlimePluginManager(PluginSelection(plugins=[])).load()
    manager.hook.slime_register_commands.call_historic(kwargs={"cli": cli})
    assert {"trace", "report"} <= set(cli.commands)
    assert "core_observe" in manager.infos
