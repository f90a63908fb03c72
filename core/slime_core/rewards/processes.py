"""Reward scoring in worker processes (``rollout.reward_processes``).

Rewards run on the thread that drives the rollout, one sample after another. For a checker
written in Python, like math-verify (sympy), that is the whole cost: 0.76 ms a sample on an
H100 host, 97 ms of a 0.6 s SmolLM2 step, 200 ms of each 256-prompt evaluation (issue 43's
profile), and threads do not help (the GIL). A pool of processes scores the samples of a
rollout side by side.

Only a record that says so runs here (``extra["processes"] = True`` on its
:class:`~slime_hookspecs.records.RewardFunctionRecord`): its built function must be picklable
and pure, i.e. it reads the sample it is given and returns the reward, without changing the
sample or relying on state of the process that built it (a worker gets a copy of both). The
workers are started with ``spawn`` (not ``fork``: the parent holds CUDA, engine threads and
Ray), on first use, and import the function's module themselves. math-verify's timeouts, which
need a main thread, work in them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import multiprocessing
import os
import pickle
import re
import sys
import threading
import weakref
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from slime_hookspecs import Sample

log = logging.getLogger(__name__)

#: the record option that allows a reward function to run in worker processes
PROCESSES_KEY = "processes"


_GUARD = re.compile(r"""^\s*if\s+(?:__name__\s*==\s*['"]__main__['"]|['"]__main__['"]\s*==\s*__name__)""",
                    re.MULTILINE)


def unguarded_main() -> str | None:
    """The path of this process's ``__main__`` script when spawning workers would run its
    top level again, else None (the rules of ``multiprocessing.spawn``: a script or a
    ``python -m package.module`` is run again as ``__mp_main__``).

    A ``spawn`` worker imports the parent's main module before it does anything else; a
    script that calls ``run_training`` at its top level, without ``if __name__ ==
    "__main__":``, would start one more training run in every worker. ``core run``, ``python
    -m slime_core``, guarded scripts, notebooks and the interactive prompt are safe."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None  # `python -m package`: spawn leaves a package's __main__ alone
    path = getattr(main, "__file__", None)
    if not path or os.path.splitext(os.path.basename(path))[0] == "ipython":
        return None  # spawn runs no file (interactive, notebooks; IPython's launcher)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None  # not a file spawn can run either (a zip app, a frozen binary)
    return None if _GUARD.search(text) else str(path)


class RewardProcesses:
    """A lazily started pool of ``workers`` spawned processes; a broken pool (a worker killed)
    fails the calls in flight and is replaced at the next call."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def submit(self, fn: Any, sample: Sample) -> concurrent.futures.Future[Any]:
        """``fn(sample)`` in a worker; the future's result is the reward."""
        return self._submit(fn, sample)

    def submit_chunk(self, fn: Any, samples: list[Sample]) -> concurrent.futures.Future[Any]:
        """:func:`score_chunk` of ``samples`` in one worker."""
        return self._submit(score_chunk, fn, samples)

    def _submit(self, *call: Any) -> concurrent.futures.Future[Any]:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            return self._pool.submit(*call)
        except BrokenProcessPool:
            log.warning("a reward worker process died; starting %d new ones", self.workers)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            return self._submit(*call)

    def warm(self, fns: list[Any]) -> list[concurrent.futures.Future[Any]]:
        """Start the workers now, each scoring a throwaway sample with every function of
        ``fns`` (which the records' promise of a pure function allows), so that they have
        imported what the functions import before the first rollout needs them: a spawned
        worker importing math-verify takes seconds (2.4-3.5 s for the first evaluation's
        rewards on an H100 host, issue 43), while the parent is still setting up. What the
        warm-ups return or raise is dropped."""
        if not fns:
            return []
        return [self._submit(warm_up, list(fns)) for _ in range(self.workers)]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class InProcesses:
    """The reward ``fn`` of record ``name``, called through ``pool``: calling it returns a
    :class:`concurrent.futures.Future` (the rollout awaits it)."""

    def __init__(self, fn: Any, pool: RewardProcesses, source: str) -> None:
        # batches asked for in one turn of an event loop, sent together (submit_many), and the
        # loops with a send scheduled (a loop closed before its turn leaves its entry behind:
        # the next loop schedules its own send, which takes the stranded batches too)
        self._pending: list[tuple[list[Sample], list[concurrent.futures.Future[Any]]]] = []
        self._scheduled: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._lock = threading.Lock()
        try:
            pickle.dumps(fn)
        except Exception as exc:  # noqa: BLE001 - any pickling failure is the record's fault
            raise ValueError(
                f"{source} declares extra[{PROCESSES_KEY!r}] = True, but its built function "
                f"cannot be sent to a worker process ({type(exc).__name__}: {exc}); make the "
                "factory return a module-level function or a functools.partial of one, or "
                "drop the option (rollout.reward_processes then leaves it on the rollout's "
                "thread)"
            ) from exc
        self.fn, self.pool = fn, pool

    def __call__(self, sample: Sample) -> concurrent.futures.Future[Any]:
        return self.pool.submit(self.fn, sample)

    def submit_many(self, samples: list[Sample]) -> list[concurrent.futures.Future[Any]]:
        """One future per sample, the samples sent in one chunk per worker: a call per sample
        costs more in pickling and pipes than math-verify's scoring of a short answer
        (measured on 2 cores: 0.68 ms a sample through the pool one by one, against 0.30 ms
        on the rollout's thread). A sample's exception fails that sample's future only.

        Called from a running event loop, the samples are sent at the loop's next turn,
        together with every other batch asked for until then: the rollout scores group by
        group, and a static decode finishes every group at once, so 16 groups of 8 samples
        went out as 128 one-sample chunks to 8 workers; now as 8 chunks of 16."""
        out: list[concurrent.futures.Future[Any]] = [concurrent.futures.Future() for _ in samples]
        if not samples:
            return out
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._pending.append((list(samples), out))
            schedule = loop is not None and loop not in self._scheduled
            if schedule:
                self._scheduled.add(loop)  # type: ignore[arg-type]
        if loop is None:
            self._send()
        elif schedule:
            loop.call_soon(self._send, loop)
        return out

    def _send(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Every batch asked for so far, as one chunk per worker."""
        with self._lock:
            if loop is not None:
                self._scheduled.discard(loop)
            pending, self._pending = self._pending, []
        samples = [s for batch, _ in pending for s in batch]
        futures = [f for _, batch_futures in pending for f in batch_futures]
        if not samples:
            return
        n = min(self.pool.workers, len(samples))
        bounds = [len(samples) * k // n for k in range(n + 1)]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            try:
                chunk = self.pool.submit_chunk(self.fn, samples[lo:hi])
            except Exception as exc:  # noqa: BLE001 - the samples fail, not the event loop
                for f in futures[lo:hi]:
                    f.set_exception(exc)
                continue
            chunk.add_done_callback(functools.partial(_settle, futures[lo:hi]))


#: what :meth:`RewardProcesses.warm` scores: a math answer, so that a checker's parser runs
WARM_SAMPLE = Sample(prompt="1 + 1 = ?", response="\\boxed{2}", label="2")


def warm_up(fns: list[Any]) -> int:
    """Score :data:`WARM_SAMPLE` with each of ``fns`` (run in a worker); how many raised."""
    failed = 0
    for fn in fns:
        try:
            fn(WARM_SAMPLE)
        except Exception:  # noqa: BLE001 - a warm-up that fails costs nothing but itself
            failed += 1
    return failed


def score_chunk(fn: Any, samples: list[Sample]) -> list[tuple[bool, Any]]:
    """``(True, reward)`` or ``(False, exception)`` per sample (run in a worker)."""
    out: list[tuple[bool, Any]] = []
    for s in samples:
        try:
            out.append((True, fn(s)))
        except Exception as exc:  # noqa: BLE001 - the sample fails, its chunk goes on
            out.append((False, exc))
    return out


def _settle(futures: list[concurrent.futures.Future[Any]],
            chunk: concurrent.futures.Future[list[tuple[bool, Any]]]) -> None:
    exc = chunk.exception()
    for i, f in enumerate(futures):
        if exc is not None:
            f.set_exception(exc)
            continue
        ok, value = chunk.result()[i]
        if ok:
            f.set_result(value)
        else:
            f.set_exception(value)
