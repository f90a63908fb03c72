"""Async front of a rollout engine that batches concurrent requests.

Per-sample ``slime_generate`` coroutines each ask for one completion; the client gathers the
requests submitted while the event loop is busy and sends them to the engine as one batched
``generate`` call off the event loop's thread (a worker thread, or the main thread while the
loop runs on a helper thread: :mod:`slime_core.rollout.engine_host`), so abort and other
coroutines keep running. Engines therefore see large batches both for single-turn rollouts
and for interleaved multi-turn episodes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from slime_hookspecs import GenerateOutput, SamplingParams


class EngineClient:
    """``await client.generate(prompt_ids, params)`` -> :class:`GenerateOutput`."""

    def __init__(self, engine: Any, max_batch: int = 0, index: int = 0,
                 holdable: bool = False) -> None:
        self.engine = engine
        self.index = index
        # set on the fully-async generator's clients: a plugin whose slime_generate gets
        # this client may hold the rollout's engine calls across a weight update
        # (slime_hold_rollouts); an evaluation's clients are not, so it is never held
        self.holdable = holdable
        self.max_batch = max_batch
        self._pending: list[tuple[list[int], SamplingParams, asyncio.Future[GenerateOutput]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.requests = 0
        self.calls = 0
        # where blocking generate calls run: a CallerThreadHost while a rollout driven from
        # the main thread is in progress, else a worker thread (asyncio.to_thread)
        self.host: Any = None

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateOutput:
        fut: asyncio.Future[GenerateOutput] = asyncio.get_running_loop().create_future()
        self._pending.append((list(prompt_ids), params, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await fut

    async def _flush(self) -> None:
        # Let every runnable coroutine submit before the batch is cut.
        while True:
            size = -1
            while size != len(self._pending):
                size = len(self._pending)
                for _ in range(3):
                    await asyncio.sleep(0)
            if not self._pending:
                return
            cut = self.max_batch or len(self._pending)
            batch, self._pending = self._pending[:cut], self._pending[cut:]
            live = [(p, sp, f) for p, sp, f in batch if not f.done()]
            if not live:
                continue
            self.requests += len(live)
            self.calls += 1
            try:
                prompts, params = [p for p, _, _ in live], [sp for _, sp, _ in live]
                if self.host is not None:
                    outs = await self.host.call(self.engine.generate, prompts, params)
                else:
                    outs = await asyncio.to_thread(self.engine.generate, prompts, params)
            except BaseException as exc:  # noqa: BLE001 - delivered to every waiter
                for _, _, f in live:
                    if not f.done():
                        f.set_exception(exc)
                continue
            if len(outs) != len(live):
                err = RuntimeError(
                    f"engine {self.index} returned {len(outs)} outputs for {len(live)} prompts"
                )
                for _, _, f in live:
                    if not f.done():
                        f.set_exception(err)
                continue
            for (_, _, f), out in zip(live, outs):
                if not f.done():
                    f.set_result(out)

    def abort(self) -> None:
        self.engine.abort()

    def weight_version(self) -> int:
        return int(self.engine.weight_version())


class EngineLostError(RuntimeError):
    """A rollout engine's process or node is gone and nothing restarts it (fault tolerance
    off). Not a bad sample: the rollout stops with it instead of failing that engine's
    samples one by one while the other engines carry on."""
