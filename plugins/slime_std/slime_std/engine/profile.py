"""The local engine's rollout-side profile (``profile.rollout``): where a generate call's time goes.

Each ``generate`` call is cut into contiguous phases (one ``time.perf_counter()`` reading at
each boundary, after synchronising the device so a phase holds its own device work and no
other's):

* ``kv_alloc``: building the key/value cache of a batch (the transformers path allocates its
  buffers lazily, in its prefill);
* ``prefill``: the forward over the prompts;
* ``decode_step`` (``args.step``, ``args.rows``), one per new token, made of ``sample`` (the
  next tokens and their log-probs), ``host`` (stop checks, the read of whether any row still
  runs), ``drop_rows`` (when finished rows leave the batch, cache included) and ``decode``
  (the forward of the new tokens);
* ``host`` outside the steps: building requests and tensors, finalising rows, decoding text.

``host`` is the host gap: with the device synchronised at every boundary, it is time the
device spends waiting on Python. Outside generate calls the engine records ``weight_update``
(``update_weights``), ``weight_load`` (the model load at start-up) and ``calibrate`` (the
measurement of the floors' peak and bandwidth, when not configured). ``prefill``, ``decode``,
``sample`` carry ``args.bytes``, ``args.flops`` and ``args.floor_s``, ``weight_update``
``args.bytes`` and ``args.floor_s`` (:mod:`slime_std.engine.floors`; estimates).

Where the spans go: onto this process's tracer (``RUN_DIR/trace.json``, pid 3 ``engine``,
tid ``engine index + 1``), and into per-kind totals (training rollout / evaluation) that
``core_observe`` turns into ``perf/rollout_*`` and ``perf/eval_*`` metrics of each step
(:func:`drain`). Synchronising changes what it measures: on a GPU the device no longer runs
ahead of the host, so the profile shows each phase's serial cost, and the step is slower
than without it. Off (the default), the engine holds no profile and the loop pays one
``is not None`` test per phase boundary.

Only the local executor collects it: under Ray the engine runs in an actor process whose
spans and totals no one reads, so the engine warns and records nothing there.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from slime_core.api import current_tracer

if TYPE_CHECKING:  # torch loads with the engine; core_observe drains totals without it
    import torch

    from slime_std.engine.floors import ModelCost

ENGINE_PID = 3
# phases whose totals become metrics (perf/rollout_<name>_s; host -> host_gap)
METRIC_PHASES = ("prefill", "decode", "sample", "host", "kv_alloc", "drop_rows", "weight_update")
CALL_PHASES = ("prefill", "decode", "sample", "host")
FLOOR_PHASES = ("prefill", "decode", "sample")

_LOCK = threading.Lock()
_TOTALS: dict[bool, dict[str, float]] = {False: defaultdict(float), True: defaultdict(float)}
_STATE = {"evaluating": False}


def set_evaluating(flag: bool) -> None:
    """Attribute the generate calls from now on to evaluations (``True``) or training
    rollouts; ``core_observe`` sets it around evaluation rollouts. Where an evaluation overlaps
    a training rollout (one-step-off), calls made meanwhile count as the evaluation's."""
    _STATE["evaluating"] = bool(flag)


def drain(evaluation: bool) -> dict[str, float]:
    """The metrics of the engine time recorded since the last drain of this kind, and reset:
    ``perf/rollout_*`` (or ``perf/eval_*``) seconds per phase summed over the engines of
    this process, ``..._engine_s`` (generate calls), ``..._host_gap_s``, ``..._floor_s``
    (prefill + decode + sample floors) and the decode floor. Empty when nothing was recorded."""
    with _LOCK:
        got = dict(_TOTALS[evaluation])
        _TOTALS[evaluation] = defaultdict(float)
    if not got:
        return {}
    prefix = "perf/eval_" if evaluation else "perf/rollout_"
    out = {f"{prefix}engine_s": got.get("generate", 0.0)}
    for name in METRIC_PHASES:  # the four of every call always; the others when they happened
        if name in got or name in CALL_PHASES:
            out[prefix + ("host_gap" if name == "host" else name) + "_s"] = got.get(name, 0.0)
    if "floor:decode" in got or "floor:prefill" in got:
        out[f"{prefix}floor_s"] = sum(got.get(f"floor:{n}", 0.0) for n in FLOOR_PHASES)
        out[f"{prefix}decode_floor_s"] = got.get("floor:decode", 0.0)
    out[f"{prefix}decode_steps"] = got.get("steps", 0.0)
    return out


def _section(config: Any, name: str) -> Any:
    try:
        return config.section(name) if name in config else None
    except Exception:  # noqa: BLE001 - a config without our sections: no profile
        return None


class EngineProfile:
    """One engine's recorder: the device to synchronise, the model's cost, the peak rates."""

    def __init__(self, engine_index: int, device: torch.device, cost: ModelCost | None,
                 peak: float, bandwidth: float, source: str) -> None:
        self.engine_index = engine_index
        self.device = device
        self.cost = cost
        self.peak, self.bandwidth, self.source = peak, bandwidth, source
        self._named: Any = None  # the tracer whose engine track is named
        import torch

        sync = getattr(getattr(torch, device.type, None), "synchronize", None)
        self._sync = (lambda: sync(device)) if device.type != "cpu" and sync else None

    @classmethod
    def from_config(cls, config: Any, model: Any, device: torch.device, dtype: torch.dtype,
                    engine_index: int, moe: bool = False) -> EngineProfile | None:
        """The profile ``profile.rollout`` asks for, or None (off, or not collectable)."""
        sec = _section(config, "profile")
        if sec is None or not getattr(sec, "rollout", False):
            return None
        from slime_std.engine.floors import calibrate, model_cost

        if getattr(config.run, "executor", "local") != "local":
            print(f"profile.rollout: engine {engine_index} runs in a {config.run.executor} "
                  "worker process whose spans are not collected (local executor only); "
                  "not profiling it", file=sys.stderr)
            return None
        peak = float(sec.peak_tflops) * 1e12
        bandwidth = float(sec.memory_gbps) * 1e9
        source = "configured"
        t0 = time.perf_counter()
        if peak <= 0 or bandwidth <= 0:
            measured = calibrate(device, dtype)
            peak = peak if peak > 0 else measured[0]
            bandwidth = bandwidth if bandwidth > 0 else measured[1]
            source = "measured" if sec.peak_tflops <= 0 and sec.memory_gbps <= 0 else "mixed"
        prof = cls(engine_index, device, None if moe else model_cost(model, dtype), peak,
                   bandwidth, source)
        if source != "configured":
            prof.record("calibrate", t0, time.perf_counter(), peak_flops=peak,
                        bandwidth=bandwidth)
        return prof

    def sync(self) -> None:
        if self._sync is not None:
            self._sync()

    def floor(self, nbytes: float, flops: float) -> float:
        """max(bytes / bandwidth, FLOPs / peak): the least time of the work (an estimate)."""
        return max(nbytes / self.bandwidth if self.bandwidth > 0 else 0.0,
                   flops / self.peak if self.peak > 0 else 0.0)

    def clock(self) -> PhaseClock:
        """The clock of one generate call (started now)."""
        self.sync()
        return PhaseClock(self)

    def record(self, name: str, start: float, end: float, nbytes: float = 0.0,
               total: bool = False, **args: Any) -> None:
        """A span outside generate calls (weight load and updates, calibration);
        ``start``/``end`` are ``time.perf_counter()`` readings; ``nbytes`` copied (read and
        written: the floor moves twice that); ``total``: count it in the training side's
        totals (a weight update belongs to the step whose sync it is)."""
        if nbytes:
            args.update(bytes=nbytes, floor_s=self.floor(2 * nbytes, 0.0))
        if total:
            with _LOCK:
                _TOTALS[False][name] += end - start
        self._emit([(name, start, end, args)])

    def _emit(self, spans: list[tuple[str, float, float, dict[str, Any]]]) -> None:
        tracer = current_tracer()
        if tracer is None:
            return
        tid = self.engine_index + 1
        if self._named is not tracer:
            tracer.name_track(ENGINE_PID, "engine", tid, f"engine {self.engine_index}")
            self._named = tracer
        for name, start, end, args in spans:
            tracer.add(name, tracer.at(start), tracer.at(end), ENGINE_PID, tid, "engine", args)


class PhaseClock:
    """Cuts one generate call into contiguous phases (:meth:`cut`), decode steps included."""

    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile
        self.evaluation = bool(_STATE["evaluating"])
        self.start = self.last = time.perf_counter()
        self.spans: list[tuple[str, float, float, dict[str, Any]]] = []
        self._step: tuple[float, dict[str, Any]] | None = None
        self.totals: dict[str, float] = defaultdict(float)

    def cut(self, name: str, cost: tuple[float, float] | None = None, **args: Any) -> None:
        """The time since the previous cut was phase ``name``; ``cost`` = (bytes, FLOPs)."""
        self.profile.sync()
        now = time.perf_counter()
        if cost is not None:
            floor = self.profile.floor(*cost)
            args.update(bytes=cost[0], flops=cost[1], floor_s=floor)
            self.totals[f"floor:{name}"] += floor
        self.spans.append((name, self.last, now, args))
        self.totals[name] += now - self.last
        self.last = now

    def prefill(self, prompts: list[list[int]], width: int, prefix: int = 0) -> None:
        """The prefill of ``prompts`` (padded to ``width``; their first ``prefix`` tokens,
        common to all, computed once) ends now."""
        cost = self.profile.cost
        lengths = [len(p) for p in prompts]
        floor = None
        if cost is not None:
            distinct = [len(p) for p in {tuple(p): p for p in prompts}.values()]
            floor = cost.prefill(lengths, distinct, prefix)
        self.cut("prefill", floor, rows=len(prompts), width=width, tokens=sum(lengths))

    def begin_step(self, step: int, rows: int) -> None:
        """A decode step starts at the last cut (so the steps tile the loop)."""
        self.end_step()
        self._step = (self.last, {"step": step, "rows": rows})

    def sample(self, rows: int) -> None:
        cost = self.profile.cost
        self.cut("sample", cost.sample(rows) if cost else None)

    def decode(self, rows: int, context: int) -> None:
        cost = self.profile.cost
        self.cut("decode", cost.decode(rows, context) if cost else None, rows=rows,
                 context=context)

    def end_step(self) -> None:
        if self._step is not None:
            start, args = self._step
            self.spans.append(("decode_step", start, self.last, args))
            self.totals["steps"] += 1
            self._step = None

    def finish(self, **args: Any) -> None:
        """End the call (its remaining time is ``host``): emit its spans, add its totals.
        The ``generate`` span's args: ``args`` (rows, tokens), the engine, ``eval``, the rates
        of the floors, ``host_gap_s`` and ``rollout_id``: the rollout the driver started
        last (with overlapping rollouts, a guess)."""
        self.end_step()
        self.cut("host")
        prof = self.profile
        args.update(engine=prof.engine_index, eval=self.evaluation, peak_flops=prof.peak,
                    bandwidth=prof.bandwidth, floors=prof.source,
                    host_gap_s=self.totals["host"])
        tracer = current_tracer()
        if tracer is not None and tracer.rollout:
            args.setdefault("rollout_id", tracer.rollout.get("rollout_id"))
        self.totals["generate"] = self.last - self.start
        with _LOCK:
            kind = _TOTALS[self.evaluation]
            for key, value in self.totals.items():
                kind[key] += value
        prof._emit([("generate", self.start, self.last, args), *self.spans])
