"""Chrome trace-event spans of a run, written to ``RUN_DIR/trace.json`` (opens in Perfetto).

Format: ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` where every
span is a complete event (``"ph": "X"``, ``ts`` and ``dur`` in microseconds since the tracer
started, ``pid``/``tid``, ``cat``, ``args``) and ``"ph": "M"`` events name the tracks:

* pid 1 ``slime driver``, tid 1 ``phases``: ``setup``, ``run``, ``step`` (synchronous runs),
  ``train`` (inside it ``log_probs``, ``advantages``, ``train_step``), ``weight_sync``,
  ``save``, ``eval``, ``dump_rollout`` -- properly nested, since the driver runs them one after
  another; tid 2 ``rollouts``: ``rollout`` (``slime_before_rollout`` to ``slime_after_rollout``),
  on a track of its own because with ``run.async_rollout`` it overlaps the training of the
  previous step;
* pid 2 ``rollout samples``, one tid per *lane*: ``generate`` (and any ``turn`` or other span a
  generate implementation opens with :func:`span`) and ``reward`` of one sample. Samples of one
  rollout generate concurrently, so each gets its own lane (in order of first appearance; lanes
  are reused by the next rollout, which never overlaps in time). ``args`` name the sample
  (``rollout_id``, ``group``, ``index``, ``eval``) and its outcome (``status``,
  ``response_length``);
* pid 3 and up: tracks a plugin names with :meth:`Tracer.name_track` (slime-std's local engine
  profile, ``profile.rollout``, writes pid 3 ``engine``, one tid per engine).

Generate implementations add their own spans with::

    from slime_core.api import span

    with span("turn", turn=i) as info:   # lands on the current sample's lane
        out = await engine.generate(ids, params)
        info["new_tokens"] = len(out.token_ids)

:func:`span` costs one global lookup when no tracer runs (tracing off, or outside a run).
The tracer lives in the driver process; under a multi-process executor spans recorded in other
processes are not collected. Spans recorded off the tracer's clock (``time.perf_counter()``
readings taken by code that buffers them) convert with :meth:`Tracer.at`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

DRIVER_PID, PHASE_TID, ROLLOUT_TID = 1, 1, 2
TRAIN_PHASE, SUB_PHASE = "train", "trainer"  # keys of the train phase and of its sub-phase
SAMPLES_PID = 2
FORMAT = "slime.trace"
VERSION = 1

_TRACER: Tracer | None = None
# (pid, tid, sample args) of the sample being generated in this task / thread
_TRACK: ContextVar[tuple[int, int, dict[str, Any]] | None] = ContextVar("slime_trace_track",
                                                                        default=None)


class Tracer:
    """Collects spans in memory; :meth:`write` saves them as Chrome trace-event JSON.

    ``max_events`` bounds memory: once reached, further spans off the driver's tracks (samples,
    plugin tracks) are counted in ``otherData.dropped_events`` instead of kept (driver phases
    are always kept).
    """

    def __init__(self, max_events: int = 1_000_000, samples: bool = True) -> None:
        self._origin = time.perf_counter()
        self.wall_start = time.time()
        self.max_events = max_events
        self.samples = samples
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self.rollout: dict[str, Any] = {}  # the rollout in progress: rollout_id, eval
        self._open: dict[str, tuple[str, float, int, dict[str, Any]]] = {}
        self._lanes: dict[tuple[int, int], int] = {}
        self._max_lane = -1
        self._tracks: dict[tuple[int, int], str] = {}  # (pid, tid) -> name; tid 0: process
        self._lock = threading.Lock()  # spans may close in engine worker threads

    # -- time and raw events ---------------------------------------------------------------
    def now(self) -> float:
        """Microseconds since the tracer started."""
        return (time.perf_counter() - self._origin) * 1e6

    def at(self, perf_counter_s: float) -> float:
        """A ``time.perf_counter()`` reading of this process as microseconds on this trace."""
        return (perf_counter_s - self._origin) * 1e6

    def name_track(self, pid: int, process: str, tid: int | None = None,
                   thread: str | None = None) -> None:
        """Name process ``pid`` (and its thread ``tid``) in the written trace: how a plugin
        adds a track of its own (pids 1 and 2 are the driver's and the samples')."""
        with self._lock:
            self._tracks[(pid, 0)] = process
            if tid is not None:
                self._tracks[(pid, tid)] = thread or f"tid {tid}"

    def add(self, name: str, start: float, end: float, pid: int, tid: int, cat: str,
            args: dict[str, Any] | None = None) -> None:
        """Record one complete (``"X"``) event."""
        with self._lock:
            if pid != DRIVER_PID and len(self.events) >= self.max_events:
                self.dropped += 1
                return
            self.events.append({
                "name": name, "ph": "X", "ts": round(start, 3), "dur": round(max(end - start, 0.0), 3),
                "pid": pid, "tid": tid, "cat": cat, "args": dict(args or {}),
            })

    # -- driver phases (opened in one hook, closed in another) -----------------------------
    def open(self, key: str, name: str, tid: int = PHASE_TID, **args: Any) -> None:
        """Start phase ``key`` on driver track ``tid`` (closing a stale one of the same key)."""
        if key in self._open:
            self.close(key)
        self._open[key] = (name, self.now(), tid, args)

    def close(self, key: str, **extra: Any) -> bool:
        """End phase ``key``; returns False when it was not open."""
        item = self._open.pop(key, None)
        if item is None:
            return False
        name, start, tid, args = item
        self.add(name, start, self.now(), DRIVER_PID, tid, "phase", {**args, **extra})
        return True

    def is_open(self, key: str) -> bool:
        return key in self._open

    def close_all(self, keep: tuple[str, ...] = (), **extra: Any) -> None:
        """End every open phase but ``keep``, innermost first (after an error, at the end)."""
        for key in reversed(list(self._open)):
            if key not in keep:
                self.close(key, **extra)

    # -- sample lanes ------------------------------------------------------------------------
    def start_rollout(self, rollout_id: int, evaluation: bool) -> None:
        """A new rollout begins: its samples take lanes from 0 again."""
        self.rollout = {"rollout_id": rollout_id, "eval": evaluation}
        self._lanes = {}

    def sample_track(self, sample: Any) -> tuple[int, int]:
        key = (int(getattr(sample, "group_index", 0)), int(getattr(sample, "index", 0)))
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = len(self._lanes)
                self._max_lane = max(self._max_lane, lane)
        return SAMPLES_PID, lane + 1

    def sample_args(self, sample: Any) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout.get("rollout_id", getattr(sample, "rollout_id", -1)),
            "group": int(getattr(sample, "group_index", 0)),
            "index": int(getattr(sample, "index", 0)),
            "eval": bool(self.rollout.get("eval", False)),
        }

    # -- output ------------------------------------------------------------------------------
    def to_dict(self, **other: Any) -> dict[str, Any]:
        meta: list[dict[str, Any]] = [
            _meta("process_name", DRIVER_PID, 0, "slime driver"),
            _meta("thread_name", DRIVER_PID, PHASE_TID, "phases"),
            _meta("thread_name", DRIVER_PID, ROLLOUT_TID, "rollouts"),
            _meta("process_name", SAMPLES_PID, 0, "rollout samples"),
        ]
        meta += [_meta("thread_name", SAMPLES_PID, lane + 1, f"lane {lane}")
                 for lane in range(self._max_lane + 1)]
        with self._lock:
            meta += [_meta("process_name" if tid == 0 else "thread_name", pid, tid, name)
                     for (pid, tid), name in sorted(self._tracks.items())]
            # parents before children when they start together (longer first)
            events = sorted(self.events, key=lambda e: (e["ts"], -e["dur"]))
            dropped = self.dropped
        return {
            "traceEvents": meta + events,
            "displayTimeUnit": "ms",
            "otherData": {"format": FORMAT, "version": VERSION,
                          "wall_start_unix": self.wall_start, "dropped_events": dropped, **other},
        }

    def write(self, path: str | Path, **other: Any) -> Path:
        """Write the trace atomically (a reader never sees half a file)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(**other), default=str), encoding="utf-8")
        os.replace(tmp, path)
        return path


def write_run_trace(tracer: Tracer, run_dir: str | Path, **other: Any) -> Path:
    """Write ``RUN_DIR/trace.json``; the trace of an earlier segment of a resumed run is kept as
    ``trace.1.json``, ``trace.2.json``, ... (oldest first)."""
    path = Path(run_dir) / "trace.json"
    if path.exists():
        k = 1
        while (old := path.with_name(f"trace.{k}.json")).exists():
            k += 1
        os.replace(path, old)
    return tracer.write(path, run_dir=str(run_dir), **other)


def run_traces(run_dir: str | Path) -> list[Path]:
    """``trace.json`` and the kept traces of earlier segments (``trace.N.json``) of a run."""
    root = Path(run_dir)
    found = [p for p in root.glob("trace*.json")
             if p.name == "trace.json" or p.name[len("trace."):-len(".json")].isdigit()]
    return sorted(found)


def mark_superseded(run_dir: str | Path, step: int) -> list[Path]:
    """A resume restored the state after ``step``: in each earlier trace of the run, mark the
    spans of the steps that will run again (``args.superseded = true``) and record
    ``otherData.superseded_after_step``. Returns the files changed.

    The cut is the end of the ``save`` span of ``step`` (its checkpoint: the run saves after
    the step's eval and metrics row); a segment without that save whose first trained step
    comes after ``step`` is superseded from its setup on. An unreadable trace is left alone."""
    changed = []
    for path in run_traces(run_dir):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            events = data["traceEvents"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
        phases = [e for e in spans if e.get("pid") == DRIVER_PID]
        saves = [e for e in phases if e.get("name") == "save"
                 and (e.get("args") or {}).get("rollout_id") == step]
        ids = [(e.get("args") or {}).get("rollout_id") for e in phases if e.get("name") == "train"]
        trained = [r for r in ids if isinstance(r, int)]
        if saves:
            cut = max(e["ts"] + e["dur"] for e in saves)
        elif trained and min(trained) >= step:  # rollout r trains step r + 1
            setup = [e["ts"] + e["dur"] for e in phases if e.get("name") == "setup"]
            cut = max(setup) if setup else 0.0
        else:
            continue
        marked = 0
        for e in spans:
            if e["ts"] >= cut and not (e.get("pid") == DRIVER_PID and e.get("name") == "run"):
                e.setdefault("args", {})["superseded"] = True
                marked += 1
        other = data.setdefault("otherData", {})
        prev = other.get("superseded_after_step")
        other["superseded_after_step"] = step if not isinstance(prev, int) else min(prev, step)
        if marked or prev != other["superseded_after_step"]:
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            tmp.write_text(json.dumps(data, default=str), encoding="utf-8")
            os.replace(tmp, path)
            changed.append(path)
    return changed


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


# -- the process's tracer -------------------------------------------------------------------


def start(max_events: int = 1_000_000, samples: bool = True) -> Tracer:
    """Start a fresh tracer for this process (replacing any previous one)."""
    global _TRACER
    _TRACER = Tracer(max_events, samples)
    return _TRACER


def current() -> Tracer | None:
    """The running tracer, or ``None`` when tracing is off."""
    return _TRACER


def stop() -> Tracer | None:
    """Detach and return the running tracer."""
    global _TRACER
    tracer, _TRACER = _TRACER, None
    return tracer


@contextlib.contextmanager
def sample_context(sample: Any) -> Iterator[tuple[int, int] | None]:
    """Make ``sample``'s lane the target of :func:`span` calls without an explicit sample."""
    tracer = _TRACER
    if tracer is None or not tracer.samples:
        yield None
        return
    track = tracer.sample_track(sample)
    token = _TRACK.set((*track, tracer.sample_args(sample)))
    try:
        yield track
    finally:
        _TRACK.reset(token)


@contextlib.contextmanager
def span(name: str, sample: Any = None, **args: Any) -> Iterator[dict[str, Any]]:
    """Record the enclosed block as a span named ``name`` with ``args``.

    The span goes on ``sample``'s lane when given, else on the lane of the sample being
    generated (inside ``slime_generate``), else on the driver's phase track (which must stay
    properly nested: use it from sequential code only). Yields a dict: keys set on it are added
    to the span's ``args`` (results known only at the end). An exception is recorded in
    ``args["error"]`` and re-raised. A no-op when no tracer runs.
    """
    tracer = _TRACER
    info: dict[str, Any] = dict(args)
    if tracer is None:
        yield info
        return
    if sample is not None:
        if not tracer.samples:
            yield info
            return
        pid, tid = tracer.sample_track(sample)
        info = {**tracer.sample_args(sample), **info}
    elif (current_sample := _TRACK.get()) is not None:
        pid, tid, sample_args = current_sample
        info = {**sample_args, **info}
    else:
        pid, tid = DRIVER_PID, PHASE_TID
    cat = "sample" if pid == SAMPLES_PID else "phase"
    start_us = tracer.now()
    try:
        yield info
    except BaseException as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        tracer.add(name, start_us, tracer.now(), pid, tid, cat, info)


def sub_phase(name: str | None, **args: Any) -> None:
    """Inside the open ``train`` phase (key :data:`TRAIN_PHASE`): end the training step's
    current sub-phase and start ``name`` (``None``: start none). Sub-phases are cut where the
    step's work changes hands: the trainer hooks (``log_probs``, ``train_step``: slime-std's
    ``core_observe``) and the core's call of the advantage estimator record (``advantages``,
    :func:`slime_core.trainkit.compose.compute_advantages`). A no-op while no tracer runs in
    this process or no ``train`` phase is open."""
    tracer = _TRACER
    if tracer is None or not tracer.is_open(TRAIN_PHASE):
        return
    tracer.close(SUB_PHASE)
    if name is not None:
        tracer.open(SUB_PHASE, name, **args)
