"""The rollout-buffer HTTP service (slime's Rollout Buffer workflow, token-level).

Between the trainer and agent workers::

    trainer  --POST /start_rollout, POST /prompts-->  buffer  <--GET /task--  agent workers
    trainer  <--GET /get_rollout_data (full groups)-- buffer  <--POST /buffer/write--

Every path but ``/health`` needs ``Authorization: Bearer <token>``. Bodies and answers are
JSON; answers carry ``success`` and, on errors, ``message``. Endpoints:

* ``POST /start_rollout`` -- the task: ``group_size`` and anything the workers need (the
  engine endpoint and its token, sampling settings, ``task_type``); resets the buffer.
* ``POST /prompts`` -- ``{"instances": [{"instance_id", "samples": [PENDING Sample, ...]}]}``.
* ``GET /task?wait=S`` -- the next job ``{"instance_id", "slot", "sample", "lease_s", ...}`` with
  the task, or ``job: null`` after waiting up to ``S`` seconds; ``stopped: true`` after
  ``POST /stop``.
* ``POST /buffer/write`` -- ``{"instance_id", "slot", "samples": [finished Sample, ...]}``
  (or ``"sample"``); see :mod:`.state` for the checks.
* ``GET /get_rollout_data?num_groups=K&wait=S`` (also ``POST`` with the same keys in a JSON
  body, as slime's client does) -- up to ``K`` complete groups, waiting up to ``S`` seconds for
  ``K``, and the report (partial and invalid groups, queue, leases, counters).
* ``GET /status`` -- the report alone; ``POST /stop``; ``GET /health``.

Every body and query is checked against the schemas of :mod:`slime_agent.schemas` by
:mod:`slime_agent.validation` (shared with the agent API): unparsable JSON is a 400, a
field that breaks the schema or a sample's invariants a 422 whose message starts with the
field's path (``samples[0].tokens[3]: ...``); unknown instances are 404, taken slots 409.

The service is one event loop that every worker and the trainer share, so no client may hold
it: a body over ``max_body_bytes`` is a 413 (from ``Content-Length`` before it is read, else
as soon as a streamed body grows past it); bodies are parsed and written samples checked on a
worker thread, the loop only doing the bookkeeping, so ``/health`` and the other clients are
answered meanwhile; a connection that sends no complete request for ``header_timeout_s``
(stuck in its headers, or idle) is closed.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from slime_hookspecs import Sample

from slime_agent import schemas
from slime_agent.buffer.state import (
    BufferError,
    BufferState,
    SampleLimits,
    WritePlan,
    check_sample,
)
from slime_agent.http import ServerThread, bearer_auth, errors_middleware, new_token, read_body
from slime_agent.sections import check_bind
from slime_agent.validation import RequestError, check, parse_json, query_values

MAX_WAIT_S = 60.0
DEFAULT_MAX_BODY_MB = 16  # rollout_buffer.max_body_mb
DEFAULT_HEADER_TIMEOUT_S = 30.0  # rollout_buffer.header_timeout_s


def buffer_error(status: int, message: str, param: str | None = None,
                 code: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"success": False, "message": message}
    if param is not None:
        out["field"] = param
    return out


class RolloutBufferServer:
    """``RolloutBufferServer(host, port, token).start()``; :attr:`url`, :attr:`token`.

    :param max_body_mb: the largest request body in MiB (``rollout_buffer.max_body_mb``);
        larger ones are refused with a 413 (see the module docstring).
    :param header_timeout_s: a connection without a complete request for this long is closed
        (``rollout_buffer.header_timeout_s``).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str = "", *,
                 allow_remote: bool = False, task_timeout_s: float = 300.0,
                 max_body_mb: float = DEFAULT_MAX_BODY_MB,
                 header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S) -> None:
        check_bind(host, allow_remote, "rollout_buffer")
        if not max_body_mb > 0 or not header_timeout_s > 0:
            raise ValueError("rollout_buffer.max_body_mb and rollout_buffer.header_timeout_s "
                             f"must be > 0, got {max_body_mb!r} and {header_timeout_s!r}")
        self.token = token or new_token()
        self.state = BufferState(task_timeout_s)
        self.max_body_bytes = int(max_body_mb * (1 << 20))
        self._body_setting = f"rollout_buffer.max_body_mb = {max_body_mb:g}"
        self._changed: asyncio.Condition | None = None
        self._server = ServerThread(self._app, host, port, "slime-rollout-buffer",
                                    idle_timeout_s=float(header_timeout_s))

    def start(self) -> RolloutBufferServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def url(self) -> str:
        return self._server.url

    # -- app ---------------------------------------------------------------------------------
    def _app(self) -> Any:
        from aiohttp import web

        self._changed = asyncio.Condition()
        app = web.Application(client_max_size=self.max_body_bytes, middlewares=[
            errors_middleware(buffer_error),
            bearer_auth(self.token, buffer_error, frozenset({"/health"}))])
        r = app.router
        r.add_post("/start_rollout", self._start)
        r.add_post("/prompts", self._prompts)
        r.add_get("/task", self._task)
        r.add_post("/buffer/write", self._write)
        r.add_get("/get_rollout_data", self._get_data)
        r.add_post("/get_rollout_data", self._get_data)
        r.add_get("/status", self._status)
        r.add_post("/stop", self._stop)
        r.add_get("/health", self._health)
        return app

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def _wait(self, predicate: Any, seconds: float) -> None:
        """Wait until ``predicate()`` or ``seconds`` pass (leases expire meanwhile)."""
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        if not math.isfinite(seconds):  # NaN made the loop below spin; the schema refuses it
            seconds = 0.0
        deadline = loop.time() + min(max(seconds, 0.0), MAX_WAIT_S)
        async with self._changed:
            while not predicate():
                left = deadline - loop.time()
                if left <= 0:
                    return
                # wake at least every second so expired leases are requeued while waiting
                try:
                    await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
                except asyncio.TimeoutError:
                    self.state.expire()

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"success": True})

    async def _start(self, request: Any) -> Any:
        from aiohttp import web

        body = await self._body(request)
        check(body, schemas.TASK)
        out = self.state.start(body)
        await self._notify()
        return web.json_response({"success": True, **out})

    async def _prompts(self, request: Any) -> Any:
        from aiohttp import web

        body = await self._body(request)
        check(body, schemas.PROMPTS)
        n = self.state.add_instances(body["instances"])
        await self._notify()
        return web.json_response({"success": True, "added": n})

    async def _task(self, request: Any) -> Any:
        from aiohttp import web

        query = query_values(request.query)
        check(query, schemas.TASK_QUERY)
        wait = float(query.get("wait", 0))
        if self.state.task is None and not self.state.stopped:
            await self._wait(lambda: self.state.task is not None or self.state.stopped, wait)
        if self.state.stopped:
            return web.json_response({"success": True, "job": None, "stopped": True})
        if self.state.task is None:
            raise BufferError("no task: the trainer has not started one yet", 409)
        job = self.state.lease()
        if job is None and wait > 0:
            await self._wait(lambda: bool(self.state.queue) or self.state.stopped, wait)
            job = None if self.state.stopped else self.state.lease()
        return web.json_response({"success": True, "job": job, "stopped": self.state.stopped,
                                  "task": self.state.task if job else None})

    async def _write(self, request: Any) -> Any:
        from aiohttp import web

        try:
            body = await self._body(request)
            plan = self.state.plan_write(body)
            limits = self.state.limits()
            # the per-token checks and copies of a long sample take a while: off the loop
            samples, dicts = await asyncio.to_thread(_checked, plan, limits)
            out = self.state.commit_write(plan, samples, dicts)
        except RequestError as exc:
            self.state.refused(exc)
            raise
        await self._notify()
        return web.json_response({"success": True, **out})

    async def _get_data(self, request: Any) -> Any:
        from aiohttp import web

        body = await self._body(request, allow_empty=True) if request.method == "POST" else {}
        query = {**query_values(request.query), **body}
        check(query, schemas.GET_DATA)
        num = int(query.get("num_groups", 1))
        wait = float(query.get("wait", 0))
        await self._wait(lambda: len(self.state.ready) >= num, wait)
        groups, report = self.state.take(num)
        return web.json_response({"success": len(groups) == num, "groups": groups,
                                  "report": report})

    async def _status(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"success": True, "report": self.state.report(),
                                  "task": self.state.task, "stopped": self.state.stopped})

    async def _stop(self, request: Any) -> Any:
        from aiohttp import web

        self.state.stopped = True
        await self._notify()
        return web.json_response({"success": True, "stopped": True})

    async def _body(self, request: Any, allow_empty: bool = False) -> dict[str, Any]:
        """The body as JSON: read up to the limit, parsed on a worker thread (``json.loads``
        of megabytes would hold the loop, and every client with it; in the thread it still
        holds the GIL while it scans integers, a fraction of a second for a body at the
        limit)."""
        raw = await read_body(request, self.max_body_bytes, self._body_setting)
        return await asyncio.to_thread(parse_json, raw, allow_empty=allow_empty,
                                       value_status=422)


def _checked(plan: WritePlan, limits: SampleLimits) -> tuple[list[Sample], list[dict[str, Any]]]:
    """A planned write's samples checked (:func:`check_sample`) and as stored dicts."""
    samples = [check_sample(d, w, limits) for d, w in zip(plan.raw, plan.where, strict=True)]
    return samples, [s.to_dict() for s in samples]
