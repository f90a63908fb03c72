"""Reading ``trace.json`` back: validation, phase breakdown, slowest samples (``core trace``).

The breakdown follows the nesting on each driver track: ``run`` and ``step`` are containers and
left out of the path, so ``train > log_probs[ref]`` sums every ``log_probs`` span of role ``ref``
inside a ``train`` span. Shares are of the traced wall time (first to last driver event);
``(other)`` is the wall time outside every top-level phase (loggers, checks, Python). With
``run.async_rollout`` the ``rollout`` track overlaps training, so shares may add up to more
than 100% and ``(other)`` shows 0. With ``profile.rollout`` the local engine's phases follow,
against their floors (:mod:`slime_std.observe.engine_summary`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slime_core.api import TRACE_DRIVER_PID as DRIVER_PID
from slime_core.api import TRACE_SAMPLES_PID as SAMPLES_PID

from slime_std.observe.engine_summary import (
    EngineSummary,
    engine_json,
    format_engine,
    summarize_engine,
)

CONTAINERS = ("run", "step")
_PHASES = ("X", "B", "E", "M", "i", "I", "C", "b", "e", "n")


class TraceFileError(ValueError):
    """A missing or malformed trace file."""


def trace_path(run_dir_or_file: str | Path) -> Path:
    p = Path(run_dir_or_file)
    return p / "trace.json" if p.is_dir() else p


def load_trace(run_dir_or_file: str | Path) -> dict[str, Any]:
    path = trace_path(run_dir_or_file)
    if not path.is_file():
        raise TraceFileError(
            f"{path} does not exist: the run wrote no trace (trace.enabled = false, the run is "
            "still going, or it was killed before slime_run_end)"
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceFileError(f"{path}: not JSON ({exc})") from exc
    problems = validate(doc)
    if problems:
        raise TraceFileError(f"{path}: not a valid Chrome trace: " + "; ".join(problems[:5]))
    return doc


def validate(doc: Any) -> list[str]:
    """Problems that would stop Perfetto / chrome://tracing from reading ``doc`` (empty: fine)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["top level must be an object with a 'traceEvents' list"]
    out: list[str] = []
    for i, ev in enumerate(doc["traceEvents"]):
        where = f"traceEvents[{i}]"
        if not isinstance(ev, dict):
            out.append(f"{where} is not an object")
            continue
        ph = ev.get("ph")
        if ph not in _PHASES:
            out.append(f"{where}: unknown ph {ph!r}")
        if not isinstance(ev.get("name"), str):
            out.append(f"{where}: name must be a string")
        if not isinstance(ev.get("pid"), int) or not isinstance(ev.get("tid"), int):
            out.append(f"{where}: pid and tid must be integers")
        if ph != "M" and not (isinstance(ev.get("ts"), (int, float)) and ev["ts"] >= 0):
            out.append(f"{where}: ts must be a number >= 0 (microseconds)")
        if ph == "X" and not (isinstance(ev.get("dur"), (int, float)) and ev["dur"] >= 0):
            out.append(f"{where}: complete event needs dur >= 0")
        if "args" in ev and not isinstance(ev["args"], dict):
            out.append(f"{where}: args must be an object")
    return out


@dataclass
class PhaseRow:
    path: tuple[str, ...]
    total_s: float = 0.0
    count: int = 0
    first_ts: float = 0.0

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def depth(self) -> int:
        return len(self.path) - 1


@dataclass
class SampleRow:
    rollout_id: int
    group: int
    index: int
    evaluation: bool
    generate_s: float = 0.0
    reward_s: float = 0.0
    turns: int = 0
    status: str = ""
    response_length: int = 0
    other: dict[str, float] = field(default_factory=dict)


@dataclass
class TraceSummary:
    wall_s: float
    phases: list[PhaseRow]
    samples: list[SampleRow]
    status: str = ""
    dropped: int = 0
    engine: EngineSummary | None = None  # the engine track (profile.rollout), when written

    def share(self, seconds: float) -> float:
        return seconds / self.wall_s if self.wall_s > 0 else 0.0


def _label(ev: dict[str, Any]) -> str:
    role = (ev.get("args") or {}).get("role")
    return f"{ev['name']}[{role}]" if ev["name"] == "log_probs" and role else ev["name"]


def summarize(doc: dict[str, Any]) -> TraceSummary:
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    driver = [e for e in events if e["pid"] == DRIVER_PID]
    wall = 0.0
    if driver:
        wall = (max(e["ts"] + e["dur"] for e in driver) - min(e["ts"] for e in driver)) / 1e6
    rows: dict[tuple[str, ...], PhaseRow] = {}
    for tid in sorted({e["tid"] for e in driver}):  # phases, rollouts: each track nests alone
        stack: list[tuple[float, tuple[str, ...]]] = []  # (end, path) of enclosing spans
        for ev in sorted((e for e in driver if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
            end = ev["ts"] + ev["dur"]
            while stack and stack[-1][0] < end - 5e-3:  # not enclosing (ts, dur rounded to 1 ns)
                stack.pop()
            parent = stack[-1][1] if stack else ()
            path = parent if ev["name"] in CONTAINERS else (*parent, _label(ev))
            stack.append((end, path))
            if ev["name"] in CONTAINERS:
                continue
            row = rows.setdefault(path, PhaseRow(path, first_ts=ev["ts"]))
            row.total_s += ev["dur"] / 1e6
            row.count += 1
            row.first_ts = min(row.first_ts, ev["ts"])
    ordered = _tree_order(list(rows.values()))
    samples: dict[tuple[int, bool, int, int], SampleRow] = {}
    for ev in events:
        if ev["pid"] != SAMPLES_PID:
            continue
        a = ev.get("args") or {}
        key = (int(a.get("rollout_id", -1)), bool(a.get("eval", False)),
               int(a.get("group", -1)), int(a.get("index", -1)))
        srow = samples.setdefault(key, SampleRow(key[0], key[2], key[3], key[1]))
        secs = ev["dur"] / 1e6
        if ev["name"] == "generate":
            srow.generate_s += secs
            srow.status = str(a.get("status", srow.status))
            srow.response_length = int(a.get("response_length", srow.response_length) or 0)
        elif ev["name"] == "reward":
            srow.reward_s += secs
        else:
            if ev["name"] == "turn":
                srow.turns += 1
            srow.other[ev["name"]] = srow.other.get(ev["name"], 0.0) + secs
    other = doc.get("otherData") or {}
    return TraceSummary(wall, ordered, list(samples.values()), str(other.get("status", "")),
                        int(other.get("dropped_events", 0) or 0), summarize_engine(events))


def _tree_order(rows: list[PhaseRow]) -> list[PhaseRow]:
    """Parents before children; siblings in order of their first span."""
    children: dict[tuple[str, ...], list[PhaseRow]] = {}
    for r in sorted(rows, key=lambda r: r.first_ts):
        children.setdefault(r.path[:-1], []).append(r)
    out: list[PhaseRow] = []

    def walk(prefix: tuple[str, ...]) -> None:
        for r in children.get(prefix, []):
            out.append(r)
            walk(r.path)

    walk(())
    return out


def slowest_samples(summary: TraceSummary, top: int) -> list[SampleRow]:
    return sorted(summary.samples, key=lambda s: s.generate_s + s.reward_s, reverse=True)[:top]


def format_summary(summary: TraceSummary, top: int = 10, source: str = "") -> str:
    lines = [f"trace {source}".rstrip(), f"wall time {summary.wall_s:.3f} s"
             + (f", run {summary.status}" if summary.status else "")]
    if summary.dropped:
        lines.append(f"note: {summary.dropped} sample spans were dropped (trace.max_events)")
    lines += ["", "phase breakdown", f"  {'phase':<28}{'total s':>10}{'share':>9}{'count':>7}{'mean s':>10}"]
    top_level = 0.0
    for r in summary.phases:
        if r.depth == 0:
            top_level += r.total_s
        label = "  " * r.depth + r.name
        lines.append(f"  {label:<28}{r.total_s:>10.3f}{100 * summary.share(r.total_s):>8.1f}%"
                     f"{r.count:>7}{r.total_s / max(r.count, 1):>10.4f}")
    rest = max(summary.wall_s - top_level, 0.0)
    lines.append(f"  {'(other)':<28}{rest:>10.3f}{100 * summary.share(rest):>8.1f}%")
    if summary.engine is not None:
        lines += format_engine(summary.engine)
    gens = [s.generate_s for s in summary.samples if s.generate_s > 0]
    lines += ["", f"samples: {len(summary.samples)} traced"]
    if gens:
        q = statistics.quantiles(gens, n=10) if len(gens) > 1 else [gens[0]] * 9
        lines[-1] += (f"; generate mean {statistics.fmean(gens):.4f} s, p50 {q[4]:.4f} s, "
                      f"p90 {q[8]:.4f} s, max {max(gens):.4f} s")
    slow = slowest_samples(summary, top)
    if slow:
        lines += [f"slowest samples (generate + reward), top {len(slow)}",
                  f"  {'step':>5} {'kind':<5} {'group':>6} {'index':>6} {'generate s':>11} "
                  f"{'reward s':>9} {'turns':>6} {'resp len':>9}  status"]
        for s in slow:
            lines.append(f"  {s.rollout_id:>5} {'eval' if s.evaluation else 'train':<5} {s.group:>6} "
                         f"{s.index:>6} {s.generate_s:>11.4f} {s.reward_s:>9.4f} {s.turns:>6} "
                         f"{s.response_length:>9}  {s.status}")
    return "\n".join(lines)


def summary_json(summary: TraceSummary, top: int = 10) -> dict[str, Any]:
    return {
        "wall_s": summary.wall_s, "status": summary.status, "dropped_events": summary.dropped,
        "phases": [{"path": list(r.path), "total_s": r.total_s, "count": r.count,
                    "share": summary.share(r.total_s)} for r in summary.phases],
        "slowest_samples": [s.__dict__ for s in slowest_samples(summary, top)],
        "num_samples": len(summary.samples),
        "engine": engine_json(summary.engine) if summary.engine is not None else None,
    }
