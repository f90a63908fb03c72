"""The driver loop of ``core run``, the same under every executor (``slime_core.executors``).

rollout -> reward/filters -> convert -> log-probs/advantages -> train -> sync weights -> eval
-> log the step's metrics row -> save, with lifecycle hooks around each phase (the row before
the checkpoint: see ``docs/run_directory.md`` for what a crash at any instant leaves). Metrics go to every configured logger;
``slime_on_error`` and ``slime_run_end(status="failed")`` fire before an error propagates,
and checkpoints already written are never touched by a failing step. Where each step's
rollout comes from is the rollout schedule's business (:mod:`slime_core.runner.schedule`:
generated now, one step ahead while step k trains, or continuously into a bounded buffer),
the same five calls whatever ``run.rollout_mode`` says; ``run.max_staleness`` bounds how old
a trained-on sample may be (:mod:`slime_core.runner.staleness`).
"""

from __future__ import annotations

import gc
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from slime_hookspecs import RolloutResult

from slime_core.config import Config
from slime_core.config.names import check_record_names
from slime_core.config.sections import rollout_mode
from slime_core.context import print_config_notices, set_manager
from slime_core.evaluation.metrics import eval_metrics
from slime_core.executors import make_executor
from slime_core.moe.preflight import check_router_losses, check_routing_replay
from slime_core.observe import setup_parts
from slime_core.observe.rollout_metrics import rollout_metrics
from slime_core.pluginmgr import SlimePluginManager
from slime_core.rollout.components import has_eval
from slime_core.runner import checkpoint as ckpt
from slime_core.runner import staleness, startup
from slime_core.runner.convert import samples_to_batch
from slime_core.runner.health import SkippedSteps, applied
from slime_core.runner.rundir import check_resume, make_run_dir, plugin_set, write_run_files
from slime_core.runner.schedule import RolloutSchedule, ScheduleArgs
from slime_core.runtime import process_settings
from slime_core.runtime.accelerator import select_accelerator
from slime_core.runtime.durable import fault_point


class Driver:
    def __init__(self, manager: SlimePluginManager, config: Config, resume_dir: str | None = None):
        import torch

        self.manager, self.config, self.pm = manager, config, manager.hook
        self.process_started = startup.process_start()  # perf/startup_time counts from here
        self._startup_logged = False  # perf/startup_time goes in this process's first row
        self._before_driver = time.time() - self.process_started  # perf/setup_start_time
        setup_parts.reset()
        set_manager(manager)
        # again here for records of plugins registered after resolve() (in-memory ones):
        # a wrong name fails before a run directory or a model exists
        check_record_names(manager, config)
        check_routing_replay(manager, config)  # a dense model or a backend that cannot
        check_router_losses(manager, config)  # a dense model or a backend without them
        print_config_notices(manager)  # how slime_configure resolved keys (auto: lines)
        self.accel_record = select_accelerator(manager, config.run.accelerator)
        process_settings.apply(config)
        random.seed(config.run.seed)
        torch.manual_seed(config.run.seed)
        plugins = plugin_set(manager)
        if resume_dir:
            self.run_dir = Path(resume_dir)
            check_resume(self.run_dir, config, plugins)
        else:
            given = Path(config.run.run_dir) if config.run.run_dir else None
            # what a given directory held before: a failed start removes only its own files
            self._kept = {p.name for p in given.iterdir()} if given and given.is_dir() else None
            self.run_dir = make_run_dir(config)
            write_run_files(self.run_dir, config, plugins)
        self._fresh = not resume_dir
        self.last_eval: tuple[int, dict[str, float]] | None = None  # (step, metrics)
        try:
            self._setup(manager, config, resume_dir)
        except BaseException:
            self.discard_if_stub()
            raise

    def _setup(self, manager: SlimePluginManager, config: Config, resume_dir: str | None) -> None:
        removed = ckpt.remove_stale(self.run_dir)
        if removed:
            print(f"removed leftovers of an interrupted save in {self.run_dir}: "
                  f"{', '.join(removed)}", file=sys.stderr)
        # a promoted checkpoint (killed between its marker and its rename) was never pruned
        pruned = ckpt.prune(self.run_dir, config.run.keep_checkpoints)
        if pruned:
            print(f"removed checkpoints beyond run.keep_checkpoints = "
                  f"{config.run.keep_checkpoints}: {', '.join(pruned)}", file=sys.stderr)
        reg = manager.registries
        staleness.check_config(config, reg.rollout_schedule.get(rollout_mode(config.run)))
        if not config.weights.dir:
            config.weights.dir = str(self.run_dir / "weights")
        # trainer, engines, transport, data sources (+ buffer filter), rollout manager
        self.executor = make_executor(manager, config, self.run_dir, self.accel_record)
        ex = self.executor
        self.accel, self.trainer, self.engines = ex.accelerator, ex.trainer, ex.engines
        self.train_source, self.eval_source = ex.train_source, ex.eval_source
        self.rollouts = ex.rollouts
        try:
            self.eval_start = self.eval_source.state_dict() if self.eval_source is not None else None
            self.loggers = [reg.logger.get(n).factory(config, str(self.run_dir))
                            for n in config.run.loggers]
            self.step = 0
            self._save_time: float | None = None  # reported in the row after the save
            self._heap_frozen = False  # see _freeze_heap
            self.version = 0  # trainer weight version: optimizer rollouts applied so far
            self.synced_version = -1  # version the engines hold
            # steps skipped for non-finite values (runner/health.py)
            self.skips = SkippedSteps(config.train.max_consecutive_skipped_steps)
            self.schedule = self._make_schedule()
            if resume_dir:
                with setup_parts.part("resume"):
                    self._resume()
        except BaseException:
            ex.shutdown()
            raise

    def _make_schedule(self) -> RolloutSchedule:
        config, ex = self.config, self.executor

        def before(step: int) -> None:
            self.pm.slime_before_rollout(config=config, rollout_id=step)

        def after(step: int, result: RolloutResult) -> None:
            self.pm.slime_after_rollout(config=config, rollout_id=step, result=result)

        name = rollout_mode(config.run)
        record = self.manager.registries.rollout_schedule.get(name)
        return record.factory(config, ScheduleArgs(  # type: ignore[no-any-return]
            rollout=self.rollouts.rollout, submit=ex.submit_rollout,
            prepare=self._prepare_rollout, source_state=self.train_source.state_dict,
            before=before, after=after, rollout_side=lambda: ex.rollout_side(name),
            num_rollouts=config.run.num_rollouts, batch_size=config.rollout.batch_size))

    # -- state -----------------------------------------------------------------------------
    def _resume(self) -> None:
        """Load the newest intact checkpoint (or, with none, restart from step 0), then drop
        what the loggers and traces recorded of the steps that will run again."""
        restored = ckpt.restore(self.run_dir, self._load_checkpoint)
        if restored is None:
            # a run killed before its first checkpoint: nothing to keep but its config
            print(f"resume: {self.run_dir} has no checkpoint (it stopped before its first "
                  "save); restarting it from step 0", file=sys.stderr)
            kept = -1  # the step-0 evaluation runs again too
        else:
            last, _ = restored
            kept = self.step
            print(f"resumed {self.run_dir} at step {self.step} from {last.name}", file=sys.stderr)
        for lg in self.loggers:
            rewind = getattr(lg, "rewind", None)  # optional Logger method (docs/run_directory.md)
            if rewind is not None:
                rewind(kept)
        from slime_core.observe.trace import mark_superseded

        mark_superseded(self.run_dir, kept)
        # the run's last evaluation so far, for the progress bar and the summary line, from the
        # rows kept (a resume with no step left evaluates nothing in this process)
        self.last_eval = recorded_eval(self.run_dir / "metrics.jsonl")

    def _load_checkpoint(self, last: Path) -> dict[str, Any]:
        # read every file first: a damaged one fails before any state is replaced
        state = ckpt.read_driver_state(last)
        source = ckpt.read_json(last / "data_source.json")
        restore_schedule = self.schedule.read_checkpoint(last, state)
        self.trainer.load(str(last / "trainer"))
        self.train_source.load_state_dict(source)
        random.setstate(_tuple_state(state["python_rng"]))
        self.step, self.version = state["step"], state["version"]
        restore_schedule()
        return state

    def save(self) -> None:
        path = self.run_dir / "checkpoints" / ckpt.step_name(self.step)
        self.pm.slime_before_save(config=self.config, rollout_id=self.step, path=str(path))

        held = self.schedule.checkpoint()

        def write(tmp: Path) -> None:
            self.trainer.save(str(tmp / "trainer"))
            source = held.write(tmp)
            (tmp / "data_source.json").write_text(json.dumps(source))

        state = {"step": self.step, "version": self.version, "python_rng": random.getstate(),
                 **held.state}
        # engines get re-synced from the trainer at resume, so synced_version is not saved
        final = ckpt.save_checkpoint(self.run_dir, self.step, write, state,
                                     self.config.run.keep_checkpoints)
        self.schedule.after_save(self.synced_version, self.step < self.config.run.num_rollouts)
        self.pm.slime_after_save(config=self.config, rollout_id=self.step, path=str(final))

    # -- phases ----------------------------------------------------------------------------
    def sync_weights(self) -> dict[str, float]:
        """Send the trainer's weights to the engines; ``perf/rollout_drain_time`` is the part
        spent waiting for (one-step-off) or aborting (fully-async) the generation in flight,
        which a step's ``perf/weight_sync_time`` leaves out."""
        t = time.perf_counter()
        self.schedule.before_weight_sync()  # never change weights under a generation
        drained = time.perf_counter() - t
        self.pm.slime_before_weight_sync(config=self.config, version=self.version)
        stats = self.executor.send_weights(self.version)
        self.synced_version = self.version
        for i, e in enumerate(self.engines):
            if int(e.weight_version()) != self.version:
                raise RuntimeError(
                    f"engine {i} reports weight version {e.weight_version()} after sync of "
                    f"version {self.version}"
                )
        self.pm.slime_after_weight_sync(config=self.config, version=self.version, stats=stats)
        self.schedule.after_weight_sync(self.version, self.step < self.config.run.num_rollouts)
        out = {f"perf/weight_sync_{k}": float(v) for k, v in stats.items()}
        if self.schedule.overlaps:
            out["perf/rollout_drain_time"] = drained
        return out

    def check_versions(self) -> None:
        for c in self.rollouts.clients:
            got = c.weight_version()
            if got != self.synced_version:
                raise RuntimeError(
                    f"engine {c.index} would generate with weight version {got}, but version "
                    f"{self.synced_version} was synced last (trainer at {self.version})"
                )

    def _prepare_rollout(self, step: int) -> None:
        """Before a rollout is started: the engines hold the synced weights; reseed them."""
        self.check_versions()
        self._reseed(step)

    def _reseed(self, salt: int) -> None:
        for i, e in enumerate(self.engines):
            if hasattr(e, "reseed"):
                e.reseed(self.config.run.seed * 1_000_003 + salt * 101 + i)

    def evaluate(self) -> dict[str, float]:
        assert self.eval_source is not None and self.eval_start is not None
        reseed = self.schedule.before_eval()
        self.eval_source.load_state_dict(self.eval_start)
        if reseed:
            self._reseed(-1 - self.step)
        t0 = time.perf_counter()
        result = self.rollouts.rollout(self.step, evaluation=True)
        samples = list(result.samples())
        m = eval_metrics(self.config, samples)  # eval/... and eval/<dataset>/... (pass@k)
        m["perf/eval_time"] = time.perf_counter() - t0
        self.pm.slime_log_eval(config=self.config, rollout_id=self.step, samples=samples, metrics=m)
        self.last_eval = (self.step, m)
        return m

    def train_one(self) -> dict[str, float]:
        cfg, step = self.config, self.step
        result, timings = self.schedule.take(step, self.version)
        samples = list(result.samples())
        if samples and all(s.status.value == "failed" for s in samples):
            errors = sorted({s.error or "?" for s in samples})[:3]
            raise RuntimeError(f"every sample of step {step} failed, e.g. {errors}")
        stale = staleness.drop_stale(samples, self.version, cfg.run.max_staleness)
        metrics = {**result.metrics, **rollout_metrics(cfg, samples, "rollout", self.version)}
        if cfg.run.max_staleness >= 0:
            # fully async: the generator discarded the stale groups already (counted there)
            metrics["rollout/stale_dropped"] = float(stale) + result.metrics.get(
                "rollout/stale_dropped", 0.0)
        gen_tokens = sum(s.response_length for s in samples)
        rollout_time = timings.get("perf/rollout_time", result.metrics.get("perf/rollout_time", 0.0))
        metrics["perf/rollout_tokens_per_s"] = gen_tokens / max(rollout_time, 1e-9)
        self.pm.slime_log_rollout(config=cfg, rollout_id=step, samples=samples, metrics=metrics)
        batch = samples_to_batch(cfg, samples)
        self.pm.slime_rollout_data_postprocess(config=cfg, rollout_id=step, batch=batch)
        batch.validate()
        t = time.perf_counter()
        self.pm.slime_before_train(config=cfg, rollout_id=step)
        train_metrics = self.trainer.train_step(batch, step)
        self.pm.slime_after_train(config=cfg, rollout_id=step, metrics=train_metrics)
        timings["perf/train_time"] = time.perf_counter() - t
        metrics.update(train_metrics)
        if not self._heap_frozen:
            _freeze_heap()
            self._heap_frozen = True
        self.skips.record(step, train_metrics)
        # a rollout whose every optimizer step was skipped left the weights as they were:
        # same version, so no sync is sent for it
        if applied(train_metrics, cfg.train.num_steps_per_rollout):
            self.version += 1
        self.step += 1
        due = self.step % cfg.weights.update_interval == 0 or self.step == cfg.run.num_rollouts
        if due and self.version != self.synced_version:
            t = time.perf_counter()
            synced = self.sync_weights()
            metrics.update(synced)
            # the wait for the generation in flight is the rollout's, not the transport's
            drained = synced.get("perf/rollout_drain_time", 0.0)
            timings["perf/weight_sync_time"] = time.perf_counter() - t - drained
            timings["perf/rollout_drain_time"] = drained
        metrics.update(timings)
        metrics["perf/step_time"] = sum(timings.values())
        return metrics

    def log(self, metrics: dict[str, float], step: int) -> None:
        for lg in self.loggers:
            lg.log(metrics, step)

    # -- loop --------------------------------------------------------------------------------
    def run(self) -> Path:
        cfg = self.config
        status = "failed"
        phase = "setup"
        eval_time = 0.0  # of this process, before its first step ends (not start-up)
        setup: float | None = None
        try:
            with setup_parts.part("first_sync"):
                self.sync_weights()
            self.pm.slime_run_start(config=cfg, run_dir=str(self.run_dir))
            if self.eval_source is not None and self.step == 0:
                phase = "eval"
                m0 = self.evaluate()
                eval_time += m0["perf/eval_time"]
                self.log(m0, 0)
            bar = _progress(cfg, self.step)
            while self.step < cfg.run.num_rollouts:
                phase = "train"
                t0 = time.perf_counter()
                if setup is None:
                    setup = time.time() - self.process_started - eval_time
                m = self.train_one()
                if not self._startup_logged:
                    self._startup_logged = True
                    m["perf/startup_time"] = time.time() - self.process_started - eval_time
                    m["perf/setup_time"] = setup
                    m.update(setup_parts.parts_metrics(self._before_driver))
                    print(startup.startup_line(m["perf/startup_time"], setup,
                                               m["perf/startup_time"] - setup), file=sys.stderr)
                if self.eval_source is not None and (
                    self.step % cfg.eval.interval == 0 or self.step == cfg.run.num_rollouts
                ):
                    phase = "eval"
                    m.update(self.evaluate())
                if self._save_time is not None:
                    m["perf/save_time"] = self._save_time  # of the checkpoint before this step
                    self._save_time = None
                m["perf/total_step_time"] = time.perf_counter() - t0
                # the row goes out before the checkpoint: a checkpoint of step k always has
                # row k behind it, and a resume drops the rows past its checkpoint
                self.log(m, self.step)
                fault_point("step_logged", self.step)
                self.skips.check()  # the row of the last skipped step is written first
                phase = "save"
                if cfg.run.save_interval and self.step % cfg.run.save_interval == 0:
                    t = time.perf_counter()
                    self.save()
                    self._save_time = time.perf_counter() - t
                if bar is not None:
                    bar.update(1)
                    # rollout and held-out accuracy apart: one number mixing them misleads
                    post = {"reward": f"{m.get('rollout/reward_mean', 0):.3f}",
                            "acc": f"{m.get('rollout/accuracy', 0):.2f}"}
                    if self.last_eval is not None and "eval/accuracy" in self.last_eval[1]:
                        post["eval_acc"] = f"{self.last_eval[1]['eval/accuracy']:.2f}"
                    bar.set_postfix(post)
            if bar is not None:
                bar.close()
            phase = "save"
            last = ckpt.latest_checkpoint(self.run_dir)
            if (cfg.run.num_rollouts and cfg.run.save_at_end
                    and (last is None or last.name != ckpt.step_name(self.step))):
                self.save()
            status = "completed"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except BaseException as exc:
            self.pm.slime_on_error(config=cfg, phase=phase, error=exc)
            raise
        finally:
            self.pm.slime_run_end(config=cfg, run_dir=str(self.run_dir), status=status)
            self.schedule.stop()  # before the engines go
            for lg in self.loggers:
                lg.close()
            for e in self.engines:
                e.shutdown()
            self.executor.shutdown()
            if self._heap_frozen:  # the run's objects become collectable again
                gc.unfreeze()
        return self.run_dir

    def discard_if_stub(self) -> None:
        """Remove the directory of a new run that failed before its first training step
        completed, whatever failed (the data, a model, the first rollout, the step-0
        evaluation): nothing was trained and nothing can be resumed, and a kept directory
        would refuse the same command once the cause is fixed (docs/run_directory.md). The
        error itself is on stderr. A directory given by ``run.run_dir`` that held files
        before keeps them; only this run's files go."""
        if not self._fresh or getattr(self, "step", 0) > 0:
            return
        if ckpt.latest_checkpoint(self.run_dir) is not None:
            return
        kept = getattr(self, "_kept", None)
        if kept is None:  # made by this run
            shutil.rmtree(self.run_dir, ignore_errors=True)
            what = "the run directory"
        else:
            for p in self.run_dir.iterdir():
                if p.name not in kept:
                    shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
            what = "this run's files from"
        print(f"removed {what} {self.run_dir}: the run failed before its first step (nothing "
              "was trained; the same command can run again)", file=sys.stderr)


def _progress(cfg: Any, start: int) -> Any:
    if not cfg.run.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=cfg.run.num_rollouts, initial=start, desc="slime", unit="step",
                file=sys.stderr, dynamic_ncols=True)


def _freeze_heap() -> None:
    """Move every object alive now into the cyclic collector's permanent generation.

    After setup and a first step (imports, model, tokenizer, compiled code: about 420k
    tracked objects for the README demo) each full collection scanned them all: 0.3-0.45 s a
    pause, about 4 s of a 31 s demo run. Frozen, they are no longer scanned (later full
    collections took 1-30 ms); objects made afterwards are collected as before. Done once,
    after the first step's training and before its weight sync, so no timed step pays it;
    undone (``gc.unfreeze``) when the run ends, so a process running several (tests) does
    not keep them out of collection."""
    gc.collect()
    gc.freeze()


def _tuple_state(state: Any) -> Any:
    """JSON turns random.getstate()'s tuples into lists; random.setstate needs tuples."""
    return (state[0], tuple(state[1]), state[2])


def run_training(manager: SlimePluginManager, config: Config, resume_dir: str | None = None) -> Path:
    """Run (or resume) training; returns the run directory. Ends with a summary line:
    steps, wall time, the final held-out accuracy when there was an evaluation, the directory."""
    t0 = time.perf_counter()
    driver = Driver(manager, config, resume_dir)
    start = driver.step
    try:
        run_dir = driver.run()
    except BaseException:
        driver.discard_if_stub()
        raise
    print(summary_line(driver, start, time.perf_counter() - t0), file=sys.stderr)
    return run_dir


def recorded_eval(metrics: Path) -> tuple[int, dict[str, float]] | None:
    """The last row of ``metrics.jsonl`` with ``eval/accuracy``, as (step, row); None when
    there is none (or no readable file)."""
    try:
        lines = metrics.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:  # a torn last line is the crash rules' business, not the summary's
            continue
        if isinstance(row, dict) and "eval/accuracy" in row:
            return int(row.get("step", 0)), row
    return None


def summary_line(driver: Driver, start: int, seconds: float) -> str:
    """``run completed: 40 steps in 31.2 s; final eval/accuracy 0.750 at step 40 (100
    samples); run directory: runs/x``."""
    steps = f"{driver.step - start} steps" + (f" (resumed at {start})" if start else "")
    parts = [f"run completed: {steps} in {seconds:.1f} s"]
    if driver.last_eval is not None:
        step, m = driver.last_eval
        if "eval/accuracy" in m:
            parts.append(f"final eval/accuracy {m['eval/accuracy']:.3f} at step {step} "
                         f"({int(m.get('eval/samples', 0))} samples)")
    elif not has_eval(driver.config):
        parts.append("no held-out evaluation (set data.eval_path)")
    parts.append(f"run directory: {driver.run_dir}")
    return "; ".join(parts)
