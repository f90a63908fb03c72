"""An SGLang-compatible ``/generate`` endpoint on 127.0.0.1 over the run's rollout engines.

slime code posts to ``http://{args.sglang_router_ip}:{args.sglang_router_port}/generate``;
this server answers with SGLang's native request and response shapes (SGLang 0.5.x
``GenerateReqInput`` / ``meta_info``): ``input_ids`` or ``text`` (one prompt or a batch),
``sampling_params``, ``return_logprob`` -> ``text``, ``output_ids``, ``meta_info`` with
``finish_reason`` (``{"type": "stop"|"length"|"abort", ...}``), ``weight_version``,
``prompt_tokens``, ``completion_tokens`` and ``output_token_logprobs`` (``[logprob, id, None]``).

Where generation runs: while the built-in rollout drives a ``slime_generate`` call, the request
goes to that rollout's :class:`EngineClient` on the rollout's own event loop (the one the core
batches, aborts and weight-syncs), so an HTTP request is scheduled exactly like the core's own;
otherwise (a custom ``rollout_function_path``) to this server's clients of the same engines.
The server runs on its own thread and loop for the whole run (one port, as slime's router).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from typing import Any, Callable, cast

from aiohttp import web
from slime_hookspecs import GenerateOutput, SamplingParams

# sampling_params keys accepted and ignored: they change the returned text only cosmetically
# (ids are what slime trains on) or are SGLang scheduling hints
COSMETIC = {"skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
            "stream_interval", "custom_params", "logit_bias"}
SUPPORTED = {"temperature", "top_p", "top_k", "max_new_tokens", "stop", "stop_token_ids",
             "ignore_eos", "sampling_seed", "n"}
NEUTRAL = {"min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
           "repetition_penalty": 1.0, "min_new_tokens": 0}  # accepted only at these values
REQUEST_KEYS = {"input_ids", "text", "sampling_params", "return_logprob", "logprob_start_len",
                "top_logprobs_num", "return_text_in_logprobs", "stream", "rid", "session_id",
                "return_routed_experts", "image_data", "lora_path", "model", "priority"}


BATCH_WINDOW_S = 0.003


class BadRequest(ValueError):
    pass


def to_params(sp: dict[str, Any]) -> SamplingParams:
    """SGLang ``sampling_params`` -> the project's :class:`SamplingParams`; refuses what the
    engines cannot honour, naming the field."""
    sp = {k: v for k, v in (sp or {}).items() if v is not None}
    for key, value in sp.items():
        if key in NEUTRAL and value != NEUTRAL[key]:
            raise BadRequest(f"sampling_params.{key}={value!r} is not supported by this endpoint "
                             f"(only {NEUTRAL[key]!r})")
        if key not in SUPPORTED | COSMETIC | set(NEUTRAL):
            raise BadRequest(f"sampling_params.{key} is not an SGLang sampling parameter this "
                             f"endpoint supports; supported: {sorted(SUPPORTED | COSMETIC)}")
    if sp.get("n", 1) != 1:
        raise BadRequest("sampling_params.n must be 1 (send one request per sample, as slime does)")
    stop = sp.get("stop") or []
    try:
        return SamplingParams(
            temperature=float(sp.get("temperature", 1.0)), top_p=float(sp.get("top_p", 1.0)),
            top_k=int(sp.get("top_k", -1)), max_new_tokens=int(sp.get("max_new_tokens", 128)),
            stop=[stop] if isinstance(stop, str) else list(stop),
            stop_token_ids=[int(t) for t in sp.get("stop_token_ids") or []],
            ignore_eos=bool(sp.get("ignore_eos", False)), seed=sp.get("sampling_seed"))
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"sampling_params: {exc}") from exc


def response_body(out: GenerateOutput, prompt_len: int, logprob: bool, rid: str,
                  latency: float) -> dict[str, Any]:
    reasons: dict[str, dict[str, Any]] = {
        "stop": {"type": "stop", "matched": out.token_ids[-1] if out.token_ids else None},
        "length": {"type": "length", "length": len(out.token_ids)},
        "abort": {"type": "abort", "message": "Abort in waiting queue"},
    }
    reason = reasons.get(out.finish_reason, {"type": out.finish_reason})
    meta: dict[str, Any] = {
        "id": rid, "finish_reason": reason, "prompt_tokens": prompt_len,
        "completion_tokens": len(out.token_ids), "cached_tokens": 0,
        "weight_version": str(out.weight_version), "e2e_latency": latency,
    }
    if logprob:
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [[float(lp), int(t), None]
                                         for lp, t in zip(out.log_probs, out.token_ids, strict=True)]
    return {"text": out.text, "output_ids": list(out.token_ids), "meta_info": meta}


class GenerateServer:
    """``GenerateServer(engines, tokenizer).start()`` serves until ``stop()``; ``.port``."""

    def __init__(self, engines: Callable[[], list[Any]], tokenizer: Callable[[], Any],
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self._engines, self._tokenizer = engines, tokenizer
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._bound: dict[int, tuple[Any, asyncio.AbstractEventLoop]] = {}
        self._own: dict[int, Any] = {}  # engine index -> EngineClient on this server's loop
        self._rr = itertools.count()
        self._queue: list[tuple[list[int], SamplingParams, asyncio.Future[GenerateOutput]]] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self.requests = 0

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> GenerateServer:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="slime-compat-generate",
                         daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(30)
        return self

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("POST", "/generate", self._generate)
        app.router.add_route("PUT", "/generate", self._generate)
        for path in ("/health", "/health_generate"):
            app.router.add_get(path, self._health)
        for path in ("/get_model_info", "/model_info", "/get_server_info", "/server_info"):
            app.router.add_get(path, self._info)
        app.router.add_get("/workers", self._workers)
        app.router.add_get("/list_workers", self._workers)
        app.router.add_post("/abort_request", self._abort)
        app.router.add_route("*", "/flush_cache", self._ok)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    # -- routing -----------------------------------------------------------------------------
    def bind(self, client: Any) -> None:
        """Route requests to ``client`` on the running loop (called from a rollout coroutine)."""
        self._bound[getattr(client, "index", 0)] = (client, asyncio.get_running_loop())

    def _target(self) -> tuple[Any, asyncio.AbstractEventLoop | None]:
        live = [(c, lp) for c, lp in self._bound.values() if lp.is_running() and not lp.is_closed()]
        if live:
            return live[next(self._rr) % len(live)]
        self._bound.clear()
        from slime_core.api import EngineClient

        engines = self._engines()
        if not engines:
            raise BadRequest("no rollout engine in this process to generate with")
        i = next(self._rr) % len(engines)
        if i not in self._own:
            self._own[i] = EngineClient(getattr(engines[i], "engine", engines[i]), index=i)
        return self._own[i], None

    async def _run(self, ids: list[int], params: SamplingParams) -> GenerateOutput:
        """Queue one request; requests arriving within ``BATCH_WINDOW_S`` of each other reach
        the engine client together, so it can batch them as it batches the core's own
        (HTTP requests of concurrent samples arrive one by one)."""
        fut: asyncio.Future[GenerateOutput] = asyncio.get_running_loop().create_future()
        self._queue.append((ids, params, fut))
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(BATCH_WINDOW_S, self._flush)
        return await fut

    def _flush(self) -> None:
        self._flush_handle = None
        items, self._queue = self._queue, []
        by_target: dict[int, tuple[Any, Any, list[Any]]] = {}
        for item in items:
            try:
                client, loop = self._target()
            except BadRequest as exc:
                item[2].set_exception(exc)
                continue
            by_target.setdefault(id(client), (client, loop, []))[2].append(item)
        for client, loop, batch in by_target.values():
            asyncio.ensure_future(self._dispatch(client, loop, batch))

    async def _dispatch(self, client: Any, loop: Any, batch: list[Any]) -> None:
        async def many() -> list[Any]:
            return await asyncio.gather(*(client.generate(i, p) for i, p, _ in batch),
                                        return_exceptions=True)

        try:
            if loop is None:
                outs = await many()
            else:
                outs = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(many(), loop))
        except BaseException as exc:  # noqa: BLE001 - every waiter gets it
            outs = [exc] * len(batch)
        for (_, _, fut), out in zip(batch, outs):
            if fut.done():
                continue
            if isinstance(out, BaseException):
                fut.set_exception(out)
            else:
                fut.set_result(out)

    # -- endpoints ---------------------------------------------------------------------------
    async def _generate(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        try:
            prompts, batched = self._prompts(body)
            params = to_params(body.get("sampling_params") or {})
        except BadRequest as exc:
            return _error(400, str(exc))
        self.requests += len(prompts)
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(self._run(p, params) for p in prompts))
        rid = body.get("rid") or uuid.uuid4().hex
        answers = [response_body(o, len(p), bool(body.get("return_logprob")),
                                 rid if not batched else f"{rid}-{i}", time.perf_counter() - t0)
                   for i, (o, p) in enumerate(zip(outs, prompts))]
        return web.json_response(answers if batched else answers[0])

    def _prompts(self, body: Any) -> tuple[list[list[int]], bool]:
        if not isinstance(body, dict):
            raise BadRequest("/generate: the body must be a JSON object")
        unknown = set(body) - REQUEST_KEYS
        if unknown:
            raise BadRequest(f"/generate: unknown fields {sorted(unknown)}")
        if body.get("stream"):
            raise BadRequest("/generate: stream=true is not supported by this endpoint")
        if body.get("image_data"):
            raise BadRequest("/generate: image_data is not supported (text-only engines)")
        ids, text = body.get("input_ids"), body.get("text")
        if (ids is None) == (text is None):
            raise BadRequest("/generate: give exactly one of input_ids and text")
        if text is not None:
            texts = [text] if isinstance(text, str) else text
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise BadRequest("/generate: text must be a string or a list of strings")
            tok = self._tokenizer()
            return [list(tok.encode(t, add_special_tokens=False)) for t in texts], not isinstance(text, str)
        batched = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
        rows: list[Any] = cast(list[Any], ids) if batched else [ids]
        for row in rows:
            if not isinstance(row, list) or not row or not all(type(t) is int and t >= 0 for t in row):
                raise BadRequest("/generate: input_ids must be a non-empty list of token ids "
                                 "(or a list of such lists)")
        return rows, batched

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": "slime-compat", "is_generation": True,
                                  "version": "slime-compat"})

    async def _workers(self, request: web.Request) -> web.Response:
        return web.json_response({"workers": [{"url": self.url}], "urls": [self.url]})

    async def _abort(self, request: web.Request) -> web.Response:
        for e in self._engines():
            e.abort()
        return web.Response(status=200)

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\n")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": "BadRequestError",
                              "param": None, "code": status}, status=status)
