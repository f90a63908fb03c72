"""The agent-facing API: OpenAI-compatible ``POST /v1/chat/completions`` on the rollout engines.

An external agent framework drives episodes through it; every completion is recorded per
session (see :mod:`slime_agent.sessions`) and a finished session becomes training
samples. Endpoints (all but ``/health`` need ``Authorization: Bearer <token>``):

* ``POST /v1/chat/completions`` -- ``messages`` (roles system, developer (as system), user,
  assistant, tool; text content), optional ``tools`` (rendered by the chat template; tool
  calls in the output are parsed with ``agent_api.tool_parser`` and returned as OpenAI
  ``tool_calls``), ``max_tokens`` / ``max_completion_tokens``, ``temperature``, ``top_p``,
  ``top_k``, ``stop``, ``seed``, ``logprobs`` (the sampled tokens' log-probs, as recorded for
  training), ``stream`` (server-sent events; ``stream_options.include_usage``). Parameters the
  engines cannot honour are refused by name (:data:`~slime_agent.openai_wire.UNSUPPORTED`),
  unknown ones too. The session is the ``X-Session-Id`` header, else the ``user`` field; the
  response carries it in the ``X-Session-Id`` header and a ``session_id`` field. A request
  with neither is stateless: answered, not recorded.
* ``POST /sessions/{id}/v1/chat/completions`` (and ``GET /sessions/{id}/v1/models``) -- the
  same, the session named by the path: ``http://host:port/sessions/{id}/v1`` is a base URL
  that records into session ``id`` for agents that take only a base URL and a key.
* ``POST /v1/sessions/{id}/finish`` -- body ``{"reward", "label", "metadata", "rollout_id"}``
  (all optional) -> ``{"session_id", "samples": [Sample.to_dict(), ...]}``; the session is gone.
* ``GET /v1/sessions/{id}`` -- a summary; ``DELETE /v1/sessions/{id}`` -- drop it.
* ``GET /v1/models``, ``GET /health``.

Bodies are parsed and checked by :mod:`slime_agent.validation` against
:data:`slime_agent.schemas.CHAT` / ``FINISH`` (shared with the rollout buffer). Errors use
OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``, unknown paths included; a
bad field is a 400 naming it in ``param``, a prompt plus ``max_tokens`` beyond the model's
context a 400 ``context_length_exceeded``. The server runs on its own thread and event loop
with its own :class:`EngineClient` per engine (requests of concurrent sessions are batched
into one engine call), so it can sit beside a training loop.

Weight updates (:meth:`AgentApiServer.pause` / :meth:`~AgentApiServer.resume`, used by the
rollout buffer in fully-async mode): while paused no engine call starts (requests wait), and
the calls in flight are aborted; each continues after the update from where it stopped, with
the rest of its budget and the new weights, so the client gets one answer, only later. Its
ids record both versions (``weight_versions``); a stop string that straddles the two parts
ends the answer where it completes, as within one call. A request with a ``seed`` draws the
continued part from a new stream.

The same hold for the episodes of ``agent.entrypoint`` in fully-async mode
(:meth:`AgentApiServer.hold_rollouts` / :meth:`~AgentApiServer.release_rollouts`, through
the hooks ``slime_hold_rollouts`` / ``slime_release_rollouts``) applies only to the
sessions of the generator's episodes (:meth:`~AgentApiServer.track`): an evaluation's
episodes, and the rollout buffer's workers, go on. With ``mask_offpolicy`` an answer whose
first id came from newer weights than the session's earlier ids masks those earlier ids (an
episode held between two of its calls), as a continued call masks its own first part.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slime_hookspecs import GenerateOutput, SamplingParams

from slime_agent import schemas
from slime_agent.http import ServerThread, bearer_auth, errors_middleware, new_token
from slime_agent.openai_wire import (
    Answer,
    openai_error,
    refuse_unsupported,
    sse,
    token_logprobs,
)
from slime_agent.schemas import DEFAULT_MAX_ABS_REWARD
from slime_agent.sections import check_bind
from slime_agent.sessions import SessionError, SessionStore
from slime_agent.validation import check, check_reward_bound, parse_json

SESSION_HEADER = "X-Session-Id"
__all__ = ["AgentApiServer", "SESSION_HEADER", "engine_int", "openai_error",
           "require_chat_template"]


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    tools: list[Any] | None
    params: SamplingParams
    max_tokens: int | None  # as asked (None: the server's default, shrunk to fit)
    stream: bool
    include_usage: bool
    logprobs: bool


def engine_int(engine: Any, name: str) -> int | None:
    """``engine.<name>`` (``context_length``, ``vocab_size``) when the engine states it as a
    positive int (a local engine does; a remote handle may not)."""
    try:
        value = getattr(engine, name, None)
    except Exception:  # noqa: BLE001 - remote handles may refuse attribute access
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def require_chat_template(tokenizer: Any) -> None:
    """Refuse a tokenizer without a chat template (``ValueError`` naming ``model.tokenizer``).

    OpenAI-compatible servers render ``messages`` with the model's template; inventing one
    would record token sequences the model was never trained on, so the API refuses to start
    rather than answer every chat with a 500.
    """
    if getattr(tokenizer, "chat_template", None):
        return
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    raise ValueError(
        f"model.tokenizer ({name!r}) has no chat template, and the agent API renders every "
        "request's messages with it; point model.tokenizer at a tokenizer whose "
        "tokenizer_config.json has a chat_template (examples/openai_agent/tokenizer adds one "
        "to the tiny_arith model's)")


class AgentApiServer:
    """``AgentApiServer(engines, tokenizer, ...).start()``; see the module docstring.

    :param engines: rollout engines (``RolloutEngine``); sessions are spread round-robin and
        stay on their engine.
    :param tool_parser: a parser (``parser(text) -> (content, calls, errors)`` with ``stop``)
        used when a request carries tools; ``None`` returns text only.
    :param max_tokens: the largest ``max_tokens`` a request may ask for (also its default).
    :param context_length: prompt + completion tokens a request may need; ``None``: the first
        engine's ``context_length`` if it has one, else no limit but the 1 MiB body.
    :param chat_template_kwargs: extra keyword arguments of every chat-template call
        (``from_config``: ``data.chat_template_kwargs``, e.g. ``enable_thinking``).
    :param mask_offpolicy: an answer continued across a weight update masks what its
        session's segment generated before it (``from_config``:
        ``rollout.mask_offpolicy_in_partial_rollout``).
    :param max_abs_reward: a finished session's reward (or a value of a dict reward) beyond
        this magnitude is a 400 naming it, as NaN is (``from_config``:
        ``rollout.max_abs_reward``; 0: no bound).

    Raises ``ValueError`` naming ``model.tokenizer`` when ``tokenizer`` has no chat template:
    every request is chat messages, so such a server could only answer 500s.
    """

    def __init__(self, engines: list[Any], tokenizer: Any, *, host: str = "127.0.0.1",
                 port: int = 0, token: str = "", allow_remote: bool = False,
                 model_name: str = "slime", tool_parser: Any = None, max_tokens: int = 1024,
                 max_sessions: int = 4096, session_ttl_s: float = 3600.0,
                 context_length: int | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None,
                 mask_offpolicy: bool = False,
                 max_abs_reward: float = DEFAULT_MAX_ABS_REWARD) -> None:
        if not engines:
            raise ValueError("AgentApiServer needs at least one rollout engine")
        check_bind(host, allow_remote, "agent_api")
        require_chat_template(tokenizer)
        self.max_abs_reward = float(max_abs_reward)
        self.engines = list(engines)
        self.tokenizer = tokenizer
        self.token = token or new_token()
        self.token_generated = not token
        self.model_name = model_name
        self.tool_parser = tool_parser
        self.max_tokens = int(max_tokens)
        self.context_length = context_length or engine_int(self.engines[0], "context_length")
        self.vocab_size = engine_int(self.engines[0], "vocab_size")  # handed to buffer workers
        self.store = SessionStore(tokenizer, len(self.engines), max_sessions, session_ttl_s,
                                  chat_template_kwargs)
        self._clients: list[Any] = []
        self._server = ServerThread(self._app, host, port, "slime-agent-api")
        self.requests = 0
        self.mask_offpolicy = bool(mask_offpolicy)
        self.continued = 0  # engine calls aborted by a pause and continued after it
        # pause state, touched on the server's loop only once it runs (pause() and resume()
        # go through it)
        self._running = asyncio.Event()  # set while not paused: engine calls may start
        self._running.set()
        self._pauses = 0  # pause() count: an aborted call continues if one came meanwhile
        self._closing = False
        self._engine_calls = 0
        # the generator's episodes (fully-async agent.entrypoint): sessions held by
        # hold_rollouts, on the server's loop like the pause state above
        self._tracked: set[str] = set()
        self._rollouts_running = asyncio.Event()  # set while their calls may start
        self._rollouts_running.set()
        self._rollout_holds = 0
        self._rollouts_ended = False  # release_rollouts(end=True): their calls are refused
        self._rollout_calls = 0

    @classmethod
    def from_config(cls, config: Any, engines: list[Any], tokenizer: Any = None) -> AgentApiServer:
        """Built from ``[agent_api]`` (the parser from the tool-parser registry)."""
        from slime_core.api import get_manager

        from slime_agent.sections import section

        api = section(config, "agent_api")
        if tokenizer is None:
            from slime_core.api import load_tokenizer

            tokenizer = load_tokenizer(config.model)
        parser = None
        if api.tool_parser:
            rec = get_manager().registries.tool_parser.get(api.tool_parser)
            parser = rec.factory(config, tokenizer)
        return cls(engines, tokenizer, host=api.host, port=api.port, token=api.token,
                   allow_remote=api.allow_remote, model_name=api.model_name, tool_parser=parser,
                   max_tokens=api.max_tokens or config.rollout.max_new_tokens,
                   max_sessions=api.max_sessions, session_ttl_s=api.session_ttl_s,
                   context_length=api.max_context_tokens or None,
                   chat_template_kwargs=config.data.chat_template_kwargs,
                   mask_offpolicy=config.rollout.mask_offpolicy_in_partial_rollout,
                   max_abs_reward=config.rollout.max_abs_reward)

    # -- lifetime ----------------------------------------------------------------------------
    def start(self) -> AgentApiServer:
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server.running:
            # requests held by a pause end now (503) instead of waiting for a resume that
            # will not come (the server's shutdown would wait for them)
            self._server.call(self._close())
        self._server.stop()

    def pause(self) -> None:
        """Hold every engine call for a weight update: none starts until :meth:`resume`,
        those in flight are aborted (repeatedly: an abort ends only the calls that have
        reached the engine) and continue after it. Returns once none runs. Before
        :meth:`start` it only marks the server paused."""
        if not self._server.running:
            self._running.clear()
            return
        self._server.call(self._hold())

    def resume(self) -> None:
        """End a :meth:`pause`: the held calls go on with the engines' weights now."""
        if not self._server.running:
            self._running.set()
            return
        self._server.call(self._release())

    async def _hold(self) -> None:
        self._running.clear()
        self._pauses += 1
        await self._abort_until_none(lambda: self._engine_calls)

    async def _abort_until_none(self, calls: Callable[[], int]) -> None:
        """Abort the engines until ``calls()`` is 0, again every 50 ms: an abort ends only the
        calls that have reached the engine. The engines' abort is not per request: an
        evaluation's call running then ends aborted too (the driver evaluates between weight
        updates, so none does)."""
        while calls():
            for c in self._clients:
                c.abort()
            await asyncio.sleep(0.05)

    async def _release(self) -> None:
        self._running.set()

    def track(self, session_id: str) -> None:
        """Session ``session_id`` is an episode of the fully-async generator: held by
        :meth:`hold_rollouts` (until :meth:`untrack`). From any thread but the server's;
        call it before the episode's first request."""
        # a set's add and discard are atomic; the server's loop reads the set only
        self._tracked.add(session_id)

    def untrack(self, session_id: str) -> None:
        self._tracked.discard(session_id)

    def hold_rollouts(self) -> None:
        """:meth:`pause` for the tracked sessions only (the generator's episodes): none of
        their engine calls starts until :meth:`release_rollouts`, those in flight are aborted
        and continue after it. Returns once none of theirs runs. Before :meth:`start` it
        only marks them held."""
        if not self._server.running:
            self._rollouts_running.clear()
            self._rollout_holds += 1
            return
        self._server.call(self._hold_rollouts())

    def release_rollouts(self, end: bool = False) -> None:
        """End :meth:`hold_rollouts`; with ``end`` the tracked sessions' held and later
        calls are refused (503) instead: the run is ending."""
        if not self._server.running:
            self._rollouts_ended = self._rollouts_ended or end
            self._rollouts_running.set()
            return
        self._server.call(self._release_rollouts(end))

    async def _hold_rollouts(self) -> None:
        self._rollouts_running.clear()
        self._rollout_holds += 1
        await self._abort_until_none(lambda: self._rollout_calls)

    async def _release_rollouts(self, end: bool) -> None:
        self._rollouts_ended = self._rollouts_ended or end
        self._rollouts_running.set()

    async def _close(self) -> None:
        self._closing = True
        self._running.set()
        self._rollouts_running.set()

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients (ends in ``/v1``)."""
        return f"{self._server.url}/v1"

    def session_url(self, session_id: str) -> str:
        """A base URL whose completions are recorded in session ``session_id``."""
        from urllib.parse import quote

        return f"{self._server.url}/sessions/{quote(session_id, safe='')}/v1"

    @property
    def port(self) -> int:
        return self._server.port

    def finish_session(self, session_id: str, **kw: Any) -> list[Any]:
        """:meth:`SessionStore.finish` from another thread."""
        async def run() -> list[Any]:
            return self.store.finish(session_id, **kw)

        return self._server.call(run())

    # -- app ---------------------------------------------------------------------------------
    def _app(self) -> Any:
        from aiohttp import web
        from slime_core.api import EngineClient

        self._clients = [EngineClient(e, 0, i) for i, e in enumerate(self.engines)]
        app = web.Application(middlewares=[
            errors_middleware(openai_error),
            bearer_auth(self.token, openai_error, frozenset({"/health"}))])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # a base URL per session, for agents whose only settings are a base URL and a key
        app.router.add_post("/sessions/{sid}/v1/chat/completions", self._chat)
        app.router.add_get("/sessions/{sid}/v1/models", self._models)
        app.router.add_post("/v1/sessions/{sid}/finish", self._finish)
        app.router.add_get("/v1/sessions/{sid}", self._session)
        app.router.add_delete("/v1/sessions/{sid}", self._drop)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        st = self.store
        return web.json_response({"ok": True, "sessions": len(st.sessions),
                                  "max_sessions": st.max_sessions, "evicted_sessions": st.evicted,
                                  "expired_sessions": st.expired})

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "owned_by": "slime", "created": 0}]})

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        body = parse_json(await request.read())
        req = self._parse_request(body)
        sid = (request.match_info.get("sid") or request.headers.get(SESSION_HEADER)
               or body.get("user") or None)
        if sid is not None and len(sid) > 1024:
            raise SessionError("the session id is longer than 1024 characters", 400,
                               "user" if body.get("user") == sid else None)
        # no id: stateless like OpenAI's API (answered, not recorded, nothing left open)
        session = self.store.get_or_create(sid) if sid else self.store.stateless()
        async with session.lock:
            plan = self.store.plan(session, req.messages, req.tools)
            params = self._fit_context(len(plan.prompt_ids), req)
            out, versions, before = await self._generate(session.engine_index,
                                                         plan.prompt_ids, params,
                                                         session.id in self._tracked)
            self.requests += 1
            text = out.text or self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            message, finish = self._reply(text, out, req.tools, len(session.segments))
            if session.id:
                seg = plan.segment
                # held between two calls, the episode's earlier ids came from older weights
                older = bool(self.mask_offpolicy and seg is not None and seg.weight_versions
                             and versions and versions[0] != seg.weight_versions[-1])
                self.store.commit(session, plan, out, text, message, versions,
                                  before if self.mask_offpolicy else 0, mask_earlier=older)
        logprobs = (token_logprobs(self.tokenizer, out.token_ids, out.log_probs)
                    if req.logprobs else None)
        answer = Answer(self.model_name, message, finish, len(plan.prompt_ids),
                        len(out.token_ids), logprobs, session.id or None, out.weight_version)
        headers = {SESSION_HEADER: session.id} if session.id else {}
        if not req.stream:
            return web.json_response(answer.completion(), headers=headers)
        # the engine call is not incremental: the stream carries the finished answer in
        # OpenAI's chunk sequence, so streaming clients work unchanged
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache", **headers})
        await resp.prepare(request)
        for chunk in answer.chunks(req.include_usage):
            await resp.write(sse(chunk))
        await resp.write(sse("[DONE]"))
        await resp.write_eof()
        return resp

    async def _generate(self, engine: int, prompt_ids: list[int], params: SamplingParams,
                        tracked: bool = False) -> tuple[GenerateOutput, list[int], int]:
        """One answer: the output, the weight versions that generated its ids (in order), and
        how many of its ids came before the last weight update it was continued across.
        ``tracked``: the session is a generator's episode (:meth:`hold_rollouts` holds it)."""
        client = self._clients[engine]
        ids: list[int] = []
        log_probs: list[float] = []
        parts: list[tuple[int, int]] = []  # (first id, weight version) of each part
        joints: list[int] = []  # where a continuation after a pause took over
        while True:
            # no await between the check and the count: pause() sees every call that starts
            await self._running.wait()
            while tracked and not self._rollouts_running.is_set():
                await self._rollouts_running.wait()
                await self._running.wait()  # set: returns without yielding
            if self._closing or (tracked and self._rollouts_ended):
                raise SessionError("the agent API is shutting down (the run ended)", 503,
                                   None, "service_unavailable")
            pauses, holds = self._pauses, self._rollout_holds
            self._engine_calls += 1
            self._rollout_calls += tracked
            try:
                out = await client.generate(prompt_ids + ids, params.replace(
                    max_new_tokens=params.max_new_tokens - len(ids)))
            finally:
                self._engine_calls -= 1
                self._rollout_calls -= tracked
            if out.token_ids:
                parts.append((len(ids), int(out.weight_version)))
            ids += out.token_ids
            log_probs += out.log_probs
            held = pauses != self._pauses or (tracked and holds != self._rollout_holds)
            if out.finish_reason != "abort" or not held:
                break  # done, or aborted by something else than a pause: the client sees it
            if len(ids) >= params.max_new_tokens:
                out = GenerateOutput(out.token_ids, out.log_probs, "length", out.weight_version)
                break
            self.continued += 1
            if ids and (not joints or joints[-1] != len(ids)):
                joints.append(len(ids))
        if joints:
            out = GenerateOutput(ids, log_probs, out.finish_reason, out.weight_version)
            for joint in joints:
                cut = self._stop_across(out, joint, params.stop)
                if cut is not None:
                    out = cut
                    break
        n = len(out.token_ids)
        versions: list[int] = []
        for first, version in parts:
            if first < n and (not versions or versions[-1] != version):
                versions.append(version)
        return out, versions, max((j for j in joints if j < n), default=0)

    def _stop_across(self, out: GenerateOutput, joint: int,
                     stops: list[str]) -> GenerateOutput | None:
        """``out`` cut where a stop string that straddles ``joint`` completes, if one does (the
        engine saw each part's text alone; a string within one part ended that part)."""
        stops = [s for s in stops if s]
        if not stops:
            return None
        # the engine's window (slime_std.engine.stopping): enough ids for the longest string
        window = 2 * max(len(s) for s in stops) + 8
        for end in range(joint + 1, min(len(out.token_ids), joint + window) + 1):
            text = self.tokenizer.decode(out.token_ids[max(0, end - window):end],
                                         skip_special_tokens=True)
            if any(s in text for s in stops):
                return GenerateOutput(out.token_ids[:end], out.log_probs[:end], "stop",
                                      out.weight_version)
        return None

    def _fit_context(self, prompt_tokens: int, req: ChatRequest) -> SamplingParams:
        """The request's sampling parameters, or a 400 if prompt + completion do not fit."""
        if prompt_tokens == 0:
            raise SessionError("messages: the conversation renders to an empty prompt", 400,
                               "messages", "empty_prompt")
        max_tokens = req.max_tokens or self.max_tokens
        limit = self.context_length
        if limit is not None and prompt_tokens + max_tokens > limit:
            room = limit - prompt_tokens
            if req.max_tokens is None and room >= 1:  # no explicit ask: what still fits
                max_tokens = min(max_tokens, room)
            else:
                raise SessionError(
                    f"This model's maximum context length is {limit} tokens. However, you "
                    f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                    f"messages, {max_tokens} in the completion). Please reduce the length of "
                    "the messages or completion.", 400, "messages", "context_length_exceeded")
        return req.params.replace(max_new_tokens=max_tokens)

    def _reply(self, text: str, out: Any, tools: Any, seg: int) -> tuple[dict[str, Any], str]:
        finish = {"length": "length", "abort": "abort"}.get(out.finish_reason, "stop")
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tools and self.tool_parser is not None:
            raw = self.tokenizer.decode(out.token_ids, skip_special_tokens=False)
            content, calls, errors = self.tool_parser(raw)
            if calls:
                message["tool_calls"] = [{
                    "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                } for c in calls]
                if not errors:  # keep malformed blocks visible to the agent
                    message["content"] = content or None
                if finish == "stop":
                    finish = "tool_calls"
        return message, finish

    def _parse_request(self, body: dict[str, Any]) -> ChatRequest:
        unknown = sorted(set(body) - set(schemas.CHAT["properties"]))
        if unknown:
            raise SessionError(f"Unrecognized request argument supplied: {unknown[0]}", 400,
                               unknown[0], "unknown_parameter")
        check(body, schemas.CHAT, status=400)
        refuse_unsupported(body)
        messages = [{**m, "role": "system"} if m["role"] == "developer" else m
                    for m in body["messages"]]
        tools = body.get("tools") or None
        if body.get("tool_choice") == "none":
            tools = None
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if max_tokens is not None and max_tokens > self.max_tokens:
            param = "max_completion_tokens" if body.get("max_completion_tokens") else "max_tokens"
            raise SessionError(f"{param}: {max_tokens} is above the limit {self.max_tokens} "
                               "(agent_api.max_tokens)", 400, param, "invalid_value")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        if tools and self.tool_parser is not None:
            stop += [s for s in getattr(self.tool_parser, "stop", []) if s not in stop]
        get = lambda k, d: d if body.get(k) is None else body[k]  # noqa: E731 - null = default
        params = SamplingParams(
            temperature=float(get("temperature", 1.0)), top_p=float(get("top_p", 1.0)),
            top_k=int(get("top_k", -1)), max_new_tokens=max_tokens or self.max_tokens,
            stop=stop, seed=body.get("seed"))
        return ChatRequest(messages, tools, params, max_tokens, bool(body.get("stream")),
                           bool((body.get("stream_options") or {}).get("include_usage")),
                           bool(body.get("logprobs")))

    async def _finish(self, request: Any) -> Any:
        from aiohttp import web

        body = parse_json(await request.read(), allow_empty=True)
        check(body, schemas.FINISH, status=400)
        check_reward_bound(body.get("reward"), self.max_abs_reward, "reward", status=400)
        sid = request.match_info["sid"]
        samples = self.store.finish(sid, reward=body.get("reward"), label=body.get("label"),
                                    metadata=body.get("metadata") or {},
                                    rollout_id=body.get("rollout_id", -1))
        return web.json_response({"session_id": sid, "samples": [s.to_dict() for s in samples]})

    async def _session(self, request: Any) -> Any:
        from aiohttp import web

        s = self.store.get(request.match_info["sid"])
        return web.json_response({"session_id": s.id, "engine": s.engine_index, "segments": [
            {"tokens": len(g.tokens), "prompt_length": g.prompt_length,
             "completions": g.completions, "trainable_tokens": sum(g.loss_mask)}
            for g in s.segments]})

    async def _drop(self, request: Any) -> Any:
        from aiohttp import web

        sid = request.match_info["sid"]
        self.store.drop(sid)
        return web.json_response({"session_id": sid, "deleted": True})
