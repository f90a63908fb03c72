"""The engine side of ``core trace``: the local engine's phases (``profile.rollout``) against
their floors, read from ``trace.json``'s ``engine`` track (pid 3,
:mod:`slime_std.engine.profile`).

Rows are per kind of generate call (``train``: training rollouts, ``eval``: evaluations):
``generate`` (the calls), then the phases that tile them, so their shares add up to 100% of
``generate``: ``prefill``, ``decode`` (the forwards of the decode steps), ``sample``,
``host gap`` (every ``host`` span, in the steps and around them), ``kv_alloc``,
``drop_rows``; last ``decode_step``, the steps themselves (each a ``sample``, ``host`` and
``decode``: a container, no share). Spans outside
calls (``weight_update``, ``weight_load``, ``calibrate``) are rows of kind ``-``. ``floor s``
sums the spans' ``args.floor_s`` (bytes / bandwidth or FLOPs / peak, whichever is larger: an
estimate, see :mod:`slime_std.engine.floors`); ``x floor`` is the measured time over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENGINE_PID = 3  # slime_std.engine.profile.ENGINE_PID (that module loads torch's types)
CALL_ORDER = ("generate", "prefill", "decode", "sample", "host", "kv_alloc", "drop_rows",
              "decode_step")
OUTSIDE_ORDER = ("weight_update", "weight_load", "calibrate")


@dataclass
class EngineRow:
    kind: str  # train | eval | - (outside generate calls)
    name: str
    total_s: float = 0.0
    count: int = 0
    floor_s: float | None = None

    @property
    def label(self) -> str:
        return "host gap" if self.name == "host" else self.name


@dataclass
class EngineSummary:
    rows: list[EngineRow]
    rates: dict[str, Any]  # peak_flops, bandwidth, floors (configured | measured | mixed)

    def call_total(self, kind: str) -> float:
        return sum(r.total_s for r in self.rows if r.kind == kind and r.name == "generate")


def summarize_engine(events: list[dict[str, Any]]) -> EngineSummary | None:
    """The engine rows of a trace's complete events; None when it has no engine track."""
    spans = sorted((e for e in events if e.get("pid") == ENGINE_PID),
                   key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    if not spans:
        return None
    rows: dict[tuple[str, str], EngineRow] = {}
    rates: dict[str, Any] = {}
    calls: dict[int, tuple[float, str]] = {}  # tid -> (end, kind) of the call in progress
    for ev in spans:
        a = ev.get("args") or {}
        if ev["name"] == "generate":
            kind = "eval" if a.get("eval") else "train"
            calls[ev["tid"]] = (ev["ts"] + ev["dur"], kind)
            rates = {k: a[k] for k in ("peak_flops", "bandwidth", "floors") if k in a} or rates
        else:
            end, kind = calls.get(ev["tid"], (-1.0, "-"))
            if ev["ts"] >= end + 5e-3:  # after the call: a span of its own
                kind = "-"
        row = rows.setdefault((kind, ev["name"]), EngineRow(kind, ev["name"]))
        row.total_s += ev["dur"] / 1e6
        row.count += 1
        if isinstance(a.get("floor_s"), (int, float)):
            row.floor_s = (row.floor_s or 0.0) + float(a["floor_s"])
    for kind in ("train", "eval"):  # a call's floor: the sum of its phases'
        floors = [r.floor_s for r in rows.values() if r.kind == kind and r.floor_s is not None]
        if (kind, "generate") in rows and floors:
            rows[(kind, "generate")].floor_s = sum(floors)

    def order(r: EngineRow) -> tuple[int, int]:
        names = OUTSIDE_ORDER if r.kind == "-" else CALL_ORDER
        rank = names.index(r.name) if r.name in names else len(names)
        return ({"train": 0, "eval": 1}.get(r.kind, 2), rank)

    return EngineSummary(sorted(rows.values(), key=order), rates)


def format_engine(summary: EngineSummary) -> list[str]:
    r = summary.rates
    rates = ""
    if "peak_flops" in r and "bandwidth" in r:
        rates = (f" against {r['peak_flops'] / 1e12:.3g} TFLOP/s and "
                 f"{r['bandwidth'] / 1e9:.3g} GB/s ({r.get('floors', '?')})")
    lines = ["", f"engine phases (profile.rollout; floors are estimates{rates})",
             f"  {'kind':<6}{'phase':<16}{'total s':>10}{'share':>9}{'count':>7}{'mean s':>10}"
             f"{'floor s':>11}{'x floor':>9}"]
    for row in summary.rows:
        call = summary.call_total(row.kind)
        share = " " * 9
        if row.kind != "-" and call > 0 and row.name != "decode_step":
            share = f"{100 * row.total_s / call:>8.1f}%"
        indent = "" if row.name in ("generate", *OUTSIDE_ORDER) else "  "
        floor = ratio = ""
        if row.floor_s is not None:
            floor = f"{row.floor_s:.6f}"
            ratio = f"{row.total_s / row.floor_s:.0f}x" if row.floor_s > 0 else ""
        lines.append(f"  {row.kind:<6}{indent + row.label:<16}{row.total_s:>10.4f}{share}"
                     f"{row.count:>7}{row.total_s / max(row.count, 1):>10.5f}"
                     f"{floor:>11}{ratio:>9}")
    lines.append("  (prefill .. drop_rows tile the calls; a decode_step is a sample, host and "
                 "decode; host gap: time the device waits on Python)")
    return lines


def engine_json(summary: EngineSummary) -> dict[str, Any]:
    return {"rates": summary.rates,
            "phases": [{"kind": r.kind, "name": r.name, "total_s": r.total_s, "count": r.count,
                        "floor_s": r.floor_s} for r in summary.rows]}
