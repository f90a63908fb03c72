"""The agent-facing API: OpenAI-compatible ``POST /v1/chat/completions`` on the rollout engines.

An external agent framework drives episodes through it; every completion is recorded per
session (see :mod:`slime_core.agent.sessions`) and a finished session becomes training
samples. Endpoints (all but ``/health`` need ``Authorization: Bearer <token>``):

* ``POST /v1/chat/completions`` -- ``messages``, optional ``tools`` (rendered by the chat
  template; tool calls in the output are parsed with ``agent_api.tool_parser`` and returned as
  OpenAI ``tool_calls``), ``max_tokens`` / ``max_completion_tokens``, ``temperature``,
  ``top_p``, ``top_k``, ``stop``, ``seed``. ``n`` must be 1 and ``stream`` false. The session is
  the ``X-Session-Id`` header, else the ``user`` field, else a new one; the response carries
  it in the ``X-Session-Id`` header and a ``session_id`` field.
* ``POST /v1/sessions/{id}/finish`` -- body ``{"reward", "label", "metadata", "rollout_id"}``
  (all optional) -> ``{"session_id", "samples": [Sample.to_dict(), ...]}``; the session is gone.
* ``GET /v1/sessions/{id}`` -- a summary; ``DELETE /v1/sessions/{id}`` -- drop it.
* ``GET /v1/models``, ``GET /health``.

Errors use OpenAI's shape ``{"error": {"message", "type", "code"}}``. The server runs on its
own thread and event loop with its own :class:`EngineClient` per engine (requests of
concurrent sessions are batched into one engine call), so it can sit beside a training loop.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from slime_core.agent.config import check_bind
from slime_core.agent.http import ServerThread, bearer_auth, new_token
from slime_core.agent.sessions import SessionError, SessionStore
from slime_hookspecs import SamplingParams

SESSION_HEADER = "X-Session-Id"
_ROLES = ("system", "user", "assistant", "tool")


def openai_error(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    kind = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "code": code}}


class AgentApiServer:
    """``AgentApiServer(engines, tokenizer, ...).start()``; see the module docstring.

    :param engines: rollout engines (``RolloutEngine``); sessions are spread round-robin and
        stay on their engine.
    :param tool_parser: a parser (``parser(text) -> (content, calls, errors)`` with ``stop``)
        used when a request carries tools; ``None`` returns text only.
    :param max_tokens: the largest ``max_tokens`` a request may ask for (also its default).
    """

    def __init__(self, engines: list[Any], tokenizer: Any, *, host: str = "127.0.0.1",
                 port: int = 0, token: str = "", allow_remote: bool = False,
                 model_name: str = "slime", tool_parser: Any = None, max_tokens: int = 1024,
                 max_sessions: int = 4096, session_ttl_s: float = 3600.0) -> None:
        if not engines:
            raise ValueError("AgentApiServer needs at least one rollout engine")
        check_bind(host, allow_remote, "agent_api")
        self.engines = list(engines)
        self.tokenizer = tokenizer
        self.token = token or new_token()
        self.model_name = model_name
        self.tool_parser = tool_parser
        self.max_tokens = int(max_tokens)
        self.store = SessionStore(tokenizer, len(self.engines), max_sessions, session_ttl_s)
        self._clients: list[Any] = []
        self._server = ServerThread(self._app, host, port, "slime-agent-api")
        self.requests = 0

    @classmethod
    def from_config(cls, config: Any, engines: list[Any], tokenizer: Any = None) -> AgentApiServer:
        """Built from ``[agent_api]`` (the parser from the tool-parser registry)."""
        from slime_core.agent.config import section
        from slime_core.context import get_manager

        api = section(config, "agent_api")
        if tokenizer is None:
            from slime_core.engine.model_loading import load_tokenizer

            tokenizer = load_tokenizer(config.model)
        parser = None
        if api.tool_parser:
            rec = get_manager().registries.tool_parser.get(api.tool_parser)
            parser = rec.factory(config, tokenizer)
        return cls(engines, tokenizer, host=api.host, port=api.port, token=api.token,
                   allow_remote=api.allow_remote, model_name=api.model_name, tool_parser=parser,
                   max_tokens=api.max_tokens or config.rollout.max_new_tokens,
                   max_sessions=api.max_sessions, session_ttl_s=api.session_ttl_s)

    # -- lifetime ----------------------------------------------------------------------------
    def start(self) -> AgentApiServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients (ends in ``/v1``)."""
        return f"{self._server.url}/v1"

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

        from slime_core.runner.engine_client import EngineClient

        self._clients = [EngineClient(e, 0, i) for i, e in enumerate(self.engines)]
        app = web.Application(middlewares=[
            _errors_middleware(), bearer_auth(self.token, openai_error, frozenset({"/health"}))])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/sessions/{sid}/finish", self._finish)
        app.router.add_get("/v1/sessions/{sid}", self._session)
        app.router.add_delete("/v1/sessions/{sid}", self._drop)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"ok": True, "sessions": len(self.store.sessions)})

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "owned_by": "slime", "created": 0}]})

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        body = await _json_body(request)
        messages, tools, params = self._parse_request(body)
        sid = request.headers.get(SESSION_HEADER) or body.get("user") or None
        session = self.store.get_or_create(str(sid) if sid else None)
        async with session.lock:
            plan = self.store.plan(session, messages, tools)
            out = await self._clients[session.engine_index].generate(plan.prompt_ids, params)
            self.requests += 1
            text = out.text or self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            message, finish = self._reply(text, out, tools, len(session.segments))
            self.store.commit(session, plan, out, text, message)
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
            "created": int(time.time()), "model": self.model_name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": len(plan.prompt_ids),
                      "completion_tokens": len(out.token_ids),
                      "total_tokens": len(plan.prompt_ids) + len(out.token_ids)},
            "session_id": session.id,
            "weight_version": out.weight_version,
        }
        return web.json_response(payload, headers={SESSION_HEADER: session.id})

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

    def _parse_request(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, SamplingParams]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise SessionError("'messages' must be a non-empty list")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in _ROLES:
                raise SessionError(f"messages[{i}] needs a 'role' in {', '.join(_ROLES)}")
        if body.get("stream"):
            raise SessionError("streaming is not supported (set 'stream': false)")
        if body.get("n", 1) != 1:
            raise SessionError("only n = 1 is supported")
        tools = body.get("tools") or None
        if tools is not None and not (isinstance(tools, list)
                                      and all(isinstance(t, dict) for t in tools)):
            raise SessionError("'tools' must be a list of tool objects")
        if body.get("tool_choice") == "none":
            tools = None
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens")) or self.max_tokens
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise SessionError("'max_tokens' must be a positive integer")
        if max_tokens > self.max_tokens:
            raise SessionError(f"'max_tokens' {max_tokens} is above the limit {self.max_tokens} "
                               "(agent_api.max_tokens)")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) for s in stop):
            raise SessionError("'stop' must be a string or a list of strings")
        if tools and self.tool_parser is not None:
            stop += [s for s in getattr(self.tool_parser, "stop", []) if s not in stop]
        try:
            params = SamplingParams(
                temperature=float(body.get("temperature", 1.0)),
                top_p=float(body.get("top_p", 1.0)), top_k=int(body.get("top_k", -1)),
                max_new_tokens=max_tokens, stop=stop,
                seed=None if body.get("seed") is None else int(body["seed"]),
            )
        except (TypeError, ValueError) as exc:
            raise SessionError(f"bad sampling parameter: {exc}") from None
        return messages, tools, params

    async def _finish(self, request: Any) -> Any:
        from aiohttp import web

        body = await _json_body(request, allow_empty=True)
        rollout_id = body.get("rollout_id", -1)
        if not isinstance(rollout_id, int):
            raise SessionError("'rollout_id' must be an integer")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise SessionError("'metadata' must be an object")
        reward = body.get("reward")
        if reward is not None and not isinstance(reward, (int, float, dict)):
            raise SessionError("'reward' must be a number, an object of numbers or null")
        sid = request.match_info["sid"]
        samples = self.store.finish(sid, reward=reward, label=body.get("label"),
                                    metadata=metadata, rollout_id=rollout_id)
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
        self.store.get(sid)
        del self.store.sessions[sid]
        return web.json_response({"session_id": sid, "deleted": True})


async def _json_body(request: Any, allow_empty: bool = False) -> dict[str, Any]:
    raw = await request.read()
    if not raw and allow_empty:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise SessionError("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise SessionError("the request body must be a JSON object")
    return body


def _errors_middleware() -> Any:
    from aiohttp import web

    @web.middleware
    async def errors(request: Any, handler: Any) -> Any:
        try:
            return await handler(request)
        except SessionError as exc:
            return web.json_response(openai_error(exc.status, str(exc)), status=exc.status)
        except web.HTTPException as exc:
            return web.json_response(openai_error(exc.status, exc.reason), status=exc.status)
        except Exception as exc:  # noqa: BLE001 - the agent gets a 500 naming the error
            return web.json_response(
                openai_error(500, f"{type(exc).__name__}: {exc}"), status=500)

    return errors
