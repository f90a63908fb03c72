"""Default plugin ``core_observe``: traces, rollout dumps and replay, profiling, ``core trace``
and ``core report`` -- through ordinary hooks only (the proof that the hook surface suffices).

* **Traces** (``[trace]``): hook wrappers on the lifecycle pairs (``slime_before_*`` /
  ``slime_after_*``) open and close driver phases; wrappers on ``slime_before_log_prob`` and
  ``slime_before_train_step`` cut the training phase into ``log_probs`` / ``train_step``
  sub-phases, and the core cuts ``advantages`` where it calls the advantage estimator record
  (``slime_core.api.trace_sub_phase``; each ends where the next begins, or at
  ``slime_after_train``); a wrapper on ``slime_rollout`` times evaluations and starts the
  sample lanes; a wrapper on ``slime_generate`` records each sample's ``generate`` span and makes
  its lane the target of ``slime_core.api.span`` inside. ``RUN_DIR/trace.json``
  is written at ``slime_run_end`` (which fires after errors too).
* **Dumps / replay** (``[debug]``): ``slime_after_rollout`` (after every other plugin) writes
  the step's groups; a ``tryfirst`` ``slime_rollout`` returns them back when replaying, and the
  ``replay`` engine record stands in for the inference engine (see
  :mod:`slime_std.observe.replay`).
* **Profiling** (``[profile]``): ``slime_before_train`` / ``slime_after_train`` (the torch
  profiler); with ``profile.rollout`` the local engine records its own phases
  (:mod:`slime_std.engine.profile`): the ``slime_rollout`` wrapper says which of them are an
  evaluation's, and ``slime_log_rollout`` / ``slime_log_eval`` add their totals to the step's
  metrics (``perf/rollout_*``, ``perf/eval_*``).

Nothing heavy is imported at module level: torch and matplotlib load inside the functions.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Generator
from typing import Any

from slime_core.api import (
    TRACE_ROLLOUT_TID,
    current_tracer,
    span,
    start_tracer,
    stop_tracer,
    trace_sample_context,
    trace_sub_phase,
    write_dump,
    write_run_trace,
)
from slime_hookspecs import Config, ConfigSection, RolloutEngineRecord, hookimpl

_STATE: dict[str, Any] = {"profiler": None}


def _section(config: Config, name: str) -> Any:
    """A section of ``config`` or ``None`` (configs built from core sections only lack ours)."""
    try:
        return config.section(name) if name in config else None
    except Exception:  # noqa: BLE001 - a foreign config object: observe nothing
        return None


def _rollout_profile(config: Config) -> bool:
    """``profile.rollout``: the engine records its phases (and this plugin reports them)."""
    return bool(getattr(_section(config, "profile"), "rollout", False))


def _debug(config: Config, key: str) -> str:
    sec = _section(config, "debug")
    return str(getattr(sec, key, "") or "") if sec is not None else ""


# -- configuration and commands -------------------------------------------------------------


@hookimpl
def slime_add_config(schema: Any) -> list[ConfigSection]:
    from slime_std.observe.config import ProfileSection, TraceSection

    return [
        ConfigSection(name="trace", schema=TraceSection,
                      summary="Chrome trace of phases and samples (RUN_DIR/trace.json)"),
        ConfigSection(name="profile", schema=ProfileSection,
                      summary="torch profiler over training steps (RUN_DIR/profile/); the "
                              "local engine's phases per rollout (profile.rollout)"),
    ]


@hookimpl
def slime_configure(config: Config) -> None:
    from slime_std.observe.replay import configure_replay

    if _section(config, "debug") is not None:
        configure_replay(config)
    _STATE["profiler"] = None
    sec = _section(config, "trace")
    if sec is not None and sec.enabled:
        start_tracer(sec.max_events, sec.samples).open("setup", "setup")
    else:
        stop_tracer()


@hookimpl
def slime_register_commands(cli: Any) -> None:
    from slime_std.observe.commands import report_command, trace_command

    cli.add_command(trace_command)
    cli.add_command(report_command)


@hookimpl
def slime_register_rollout_engines() -> list[RolloutEngineRecord]:
    from slime_std.observe.replay import make_replay_engine

    return [RolloutEngineRecord(
        name="replay", factory=make_replay_engine, routing_replay=True,  # dumps keep records
        summary="no model: stands in for the engine while debug.replay_rollouts serves rollouts",
    )]


# -- run ----------------------------------------------------------------------------------------


@hookimpl
def slime_run_start(config: Config, run_dir: str) -> None:
    tracer = current_tracer()
    if tracer is not None:
        tracer.close("setup")
        tracer.open("run", "run", run_dir=run_dir)
    prof = _section(config, "profile")
    if prof is not None and prof.steps:
        from slime_std.observe.profiler import StepProfiler

        if getattr(_section(config, "run"), "executor", "local") != "local":
            print("profile.steps: the trainer runs in other processes under this executor; the "
                  "torch profiler records the driver process only", file=sys.stderr)
        _STATE["profiler"] = StepProfiler(prof, run_dir)


@hookimpl
def slime_on_error(config: Config, phase: str, error: BaseException) -> None:
    tracer = current_tracer()
    if tracer is not None:
        tracer.close_all(keep=("run", "setup"), error=f"{type(error).__name__}: {error}")


@hookimpl
def slime_run_end(config: Config, run_dir: str, status: str) -> None:
    profiler, _STATE["profiler"] = _STATE["profiler"], None
    if profiler is not None:
        profiler.finish()
    tracer = stop_tracer()
    if tracer is not None:
        tracer.close_all(status=status)
        write_run_trace(tracer, run_dir, status=status)


# -- rollout --------------------------------------------------------------------------------------


@hookimpl(wrapper=True)
def slime_before_rollout(config: Config, rollout_id: int) -> Generator[None, Any, Any]:
    tracer = current_tracer()
    if tracer is not None:
        run = _section(config, "run")
        if run is None or not (run.async_rollout or run.rollout_mode == "one_step_off"):
            # a step runs from its rollout to the next one; with one-step-off rollouts the next
            # rollout starts before this step trains, so steps are not drawn there
            tracer.close("step")
            tracer.open("step", "step", rollout_id=rollout_id)
        tracer.open(f"rollout:{rollout_id}", "rollout", TRACE_ROLLOUT_TID, rollout_id=rollout_id)
    return (yield)


@hookimpl(wrapper=True)
def slime_after_rollout(config: Config, rollout_id: int, result: Any) -> Generator[None, Any, Any]:
    out = yield  # every other plugin first: the dump holds what training will see
    tracer = current_tracer()
    if tracer is not None:
        tracer.close(f"rollout:{rollout_id}", samples=sum(len(g) for g in result.groups))
    save = _debug(config, "save_rollouts")
    if save:
        with span("dump_rollout", rollout_id=rollout_id):
            write_dump(save, rollout_id, result, evaluation=False)
    return out


@hookimpl(tryfirst=True, specname="slime_rollout")
def replay_rollout_impl(config: Config, rollout_id: int, data_source: Any, evaluation: bool) -> Any:
    """With ``debug.replay_rollouts``: the dumped groups (first, so no generation happens)."""
    directory = _debug(config, "replay_rollouts")
    if not directory:
        return None
    from slime_std.observe.replay import replay_rollout

    return replay_rollout(directory, rollout_id, evaluation)


@hookimpl(wrapper=True)
def slime_rollout(config: Config, rollout_id: int, data_source: Any,
                  evaluation: bool) -> Generator[None, Any, Any]:
    tracer = current_tracer()
    if tracer is not None:
        tracer.start_rollout(rollout_id, evaluation)
        if evaluation:
            tracer.open("eval", "eval", rollout_id=rollout_id)
    profiling = evaluation and _rollout_profile(config)
    if profiling:
        from slime_std.engine.profile import set_evaluating

        set_evaluating(True)
    try:
        result = yield
    except BaseException:
        if profiling:
            set_evaluating(False)
        raise
    save = _debug(config, "save_rollouts") if evaluation else ""

    def finish(res: Any) -> Any:
        if profiling:
            set_evaluating(False)
        if tracer is not None and evaluation:
            tracer.close("eval", samples=sum(len(g) for g in res.groups) if res is not None else 0)
        if save and res is not None:
            write_dump(save, rollout_id, res, evaluation=True)
        return res

    if inspect.isawaitable(result):
        async def awaited() -> Any:
            try:
                res = await result
            except BaseException:
                if profiling:
                    set_evaluating(False)
                raise
            return finish(res)

        return awaited()
    return finish(result)


@hookimpl(wrapper=True)
def slime_generate(config: Config, sample: Any, sampling_params: Any,
                   engine: Any) -> Generator[None, Any, Any]:
    tracer = current_tracer()
    if tracer is None or not tracer.samples:
        return (yield)
    pid, tid = tracer.sample_track(sample)
    args = tracer.sample_args(sample)
    start = tracer.now()

    def close(res: Any, error: BaseException | None = None) -> None:
        first = res[0] if isinstance(res, list) and res else res
        info = dict(args)
        if first is not None and hasattr(first, "status"):
            info.update(status=getattr(first.status, "value", str(first.status)),
                        response_length=int(first.response_length))
        if isinstance(res, list):
            info["samples"] = len(res)
        if error is not None:
            info["error"] = f"{type(error).__name__}: {error}"
        tracer.add("generate", start, tracer.now(), pid, tid, "sample", info)

    with trace_sample_context(sample):  # sync implementations' spans land on this lane
        try:
            result = yield
        except BaseException as exc:
            close(None, exc)
            raise
    if not inspect.isawaitable(result):
        close(result)
        return result

    async def timed() -> Any:
        with trace_sample_context(sample):  # async implementations run here, when awaited
            try:
                res = await result
            except BaseException as exc:
                close(None, exc)
                raise
        close(res)
        return res

    return timed()


@hookimpl
def slime_log_rollout(config: Config, rollout_id: int, samples: list[Any],
                      metrics: dict[str, float]) -> None:
    if _rollout_profile(config):
        from slime_std.engine.profile import drain

        metrics.update(drain(evaluation=False))


@hookimpl
def slime_log_eval(config: Config, rollout_id: int, samples: list[Any],
                   metrics: dict[str, float]) -> None:
    if _rollout_profile(config):
        from slime_std.engine.profile import drain

        metrics.update(drain(evaluation=True))


# -- training ----------------------------------------------------------------------------------


@hookimpl(wrapper=True)
def slime_before_train(config: Config, rollout_id: int) -> Generator[None, Any, Any]:
    tracer = current_tracer()
    if tracer is not None:
        tracer.open("train", "train", rollout_id=rollout_id)
    profiler = _STATE["profiler"]
    if profiler is not None:
        profiler.before_train(rollout_id)
    return (yield)


@hookimpl(wrapper=True)
def slime_before_log_prob(config: Config, model: Any, role: str) -> Generator[None, Any, Any]:
    trace_sub_phase("log_probs", role=role)
    return (yield)


@hookimpl(wrapper=True)
def slime_before_train_step(config: Config, rollout_id: int, step_id: int, model: Any, optimizer: Any,
                            scheduler: Any) -> Generator[None, Any, Any]:
    trace_sub_phase("train_step", rollout_id=rollout_id, step_id=step_id)
    return (yield)


@hookimpl(wrapper=True)
def slime_after_train(config: Config, rollout_id: int,
                      metrics: dict[str, float]) -> Generator[None, Any, Any]:
    out = yield
    tracer = current_tracer()
    profiler = _STATE["profiler"]
    trace_sub_phase(None)
    if profiler is not None:
        if tracer is not None and profiler.active and rollout_id >= profiler.last:
            with span("profile_export", rollout_id=rollout_id):
                profiler.after_train(rollout_id)
        else:
            profiler.after_train(rollout_id)
    if tracer is not None:
        tracer.close("train", **{k: v for k, v in metrics.items()
                                 if k in ("train/loss", "perf/train_tokens_per_s")})
    return out


# -- weights and checkpoints -------------------------------------------------------------------


@hookimpl(wrapper=True)
def slime_before_weight_sync(config: Config, version: int) -> Generator[None, Any, Any]:
    tracer = current_tracer()
    if tracer is not None:
        tracer.open("weight_sync", "weight_sync", version=version)
    return (yield)


@hookimpl(wrapper=True)
def slime_after_weight_sync(config: Config, version: int,
                            stats: dict[str, float]) -> Generator[None, Any, Any]:
    out = yield
    tracer = current_tracer()
    if tracer is not None:
        tracer.close("weight_sync", bytes=stats.get("bytes"))
    return out


@hookimpl(wrapper=True)
def slime_before_save(config: Config, rollout_id: int, path: str) -> Generator[None, Any, Any]:
    tracer = current_tracer()
    if tracer is not None:
        tracer.open("save", "save", rollout_id=rollout_id)
    return (yield)


@hookimpl(wrapper=True)
def slime_after_save(config: Config, rollout_id: int, path: str) -> Generator[None, Any, Any]:
    out = yield
    tracer = current_tracer()
    if tracer is not None:
        tracer.close("save", path=path)
    return out
