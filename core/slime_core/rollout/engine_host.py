"""Run a rollout's event loop on a helper thread and its engine calls on the calling thread.

Why: the rollout is asynchronous (episodes, tools, aborts interleave on one event loop) and
its engine calls block, so they cannot run on the loop's own thread. When the rollout is
driven from the main thread, the loop moves to a helper thread and the main thread executes
the engine calls it queues, one at a time, in submission order; the built-in rewards run there
too (math-verify's signal-based timeouts work on the main thread only).

The first reason given for it, that a worker thread costs a CPU engine its intra-op
parallelism (0.49-0.68 s against 0.72-0.97 s for one ``generate``), did not hold when measured
again (``bench/engine_thread.py``, 2026-12-04, 2 cores): main thread, a kept worker thread
and ``asyncio.to_thread`` within 5% of each other on the tiny model and SmolLM2-135M; only a
new thread per call was slower (0.143 s against 0.096 s median, tiny model), which no path
here does. The reward timeouts are what still ties this to the main thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _resolve(fut: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if fut.done():  # cancelled meanwhile
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


class CallerThreadHost:
    """``run(coro_fn)`` on a helper thread; ``await host.call(fn, *args)`` runs on the caller."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # the thread of the event loop it serves: only that loop's coroutines may queue calls
        # (a fully-async generator's loop runs beside an evaluation's and must not)
        self.loop_thread: threading.Thread | None = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Queue ``fn(*args)`` for the thread inside :meth:`run` and wait for its result."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._calls.put((fn, args, fut, loop))
        return await fut

    def run(self, coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``coro_fn()`` to completion; serve its :meth:`call` requests meanwhile."""
        box: dict[str, Any] = {}

        def loop_thread() -> None:
            try:
                box["value"] = asyncio.run(coro_fn())
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                box["error"] = exc
            finally:
                self._calls.put(None)

        # daemon: if the caller is interrupted (Ctrl-C) while serving, the loop it abandons
        # must not keep the process alive
        thread = threading.Thread(target=loop_thread, name="slime-rollout-loop", daemon=True)
        self.loop_thread = thread
        thread.start()
        while (item := self._calls.get()) is not None:
            fn, args, fut, loop = item
            if loop.is_closed():  # the rollout ended (or failed) with this call still queued
                continue
            value, error = None, None
            try:
                value = fn(*args)
            except Exception as exc:  # noqa: BLE001 - delivered to the awaiting coroutine
                error = exc
            try:
                loop.call_soon_threadsafe(_resolve, fut, value, error)
            except RuntimeError:
                # the loop closed while fn ran: nobody awaits the result any more, and the
                # rollout's own error (raised below) is the one to report
                if not loop.is_closed():
                    raise
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]
