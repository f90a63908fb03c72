"""Small HTTP plumbing shared by the agent API and the rollout buffer (aiohttp).

:class:`ServerThread` serves an aiohttp application from a background thread with its own
event loop, so a synchronous driver can host it; :func:`bearer_auth` refuses requests without
the token (401, ``WWW-Authenticate: Bearer``); :func:`errors_middleware` turns every refusal
(:class:`~slime_agent.validation.RequestError`, aiohttp's own 404 / 405 / 413) into the
service's error body; :func:`read_body` reads a body up to a size limit (413 from
``Content-Length`` before reading, or as soon as a streamed body grows past it);
:class:`JsonClient` is a tiny synchronous client on the standard library for trainers and
workers. Body parsing and validation are in :mod:`slime_agent.validation`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import threading
import urllib.error
import urllib.request
from typing import Any, Awaitable, Callable, cast

# (status, message, param, code) -> the JSON body of an error answer
ErrorBody = Callable[..., dict[str, Any]]


def new_token() -> str:
    """A random bearer token (32 bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def bearer_auth(token: str, error_body: ErrorBody, open_paths: frozenset[str] = frozenset()) -> Any:
    """aiohttp middleware: every path but ``open_paths`` needs ``Authorization: Bearer <token>``."""
    from aiohttp import web

    expected = token.encode()

    @web.middleware
    async def middleware(request: Any, handler: Any) -> Any:
        if request.path not in open_paths:
            scheme, _, value = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                                     expected):
                return web.json_response(
                    error_body(401, "missing or wrong bearer token (Authorization: Bearer <token>)"),
                    status=401, headers={"WWW-Authenticate": "Bearer"},
                )
        return await handler(request)

    return middleware


def _too_large(size: str, max_bytes: int, setting: str) -> Any:
    from slime_agent.validation import RequestError

    return RequestError(f"the request body ({size}) is larger than {max_bytes} bytes "
                        f"({setting})", 413, None, "request_too_large")


async def read_body(request: Any, max_bytes: int, setting: str) -> bytes:
    """The request's body, refused with a 413 (:class:`~slime_agent.validation.RequestError`
    naming ``setting``) when larger than ``max_bytes``: from ``Content-Length`` before any of
    it is read, else (chunked) as soon as what arrived grows past it, so memory stays bounded.
    aiohttp then discards the rest of a refused body for at most its lingering time (10 s)
    before closing, so a client still sending reads the 413 instead of a reset."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise _too_large(f"Content-Length {declared}", max_bytes, setting)
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > max_bytes:
            raise _too_large(f"more than {len(body)} bytes so far", max_bytes, setting)
    return bytes(body)


def errors_middleware(error_body: ErrorBody) -> Any:
    """aiohttp middleware: refusals and failures as ``error_body`` JSON with their status.

    Unknown paths and methods (aiohttp's 404 / 405), bodies over the size limit (413) and
    :class:`RequestError` keep their status; anything else is a 500 naming the exception.
    """
    from aiohttp import web

    from slime_agent.validation import RequestError

    @web.middleware
    async def errors(request: Any, handler: Any) -> Any:
        try:
            return await handler(request)
        except RequestError as exc:
            resp = web.json_response(error_body(exc.status, str(exc), exc.param, exc.code),
                                     status=exc.status)
            if exc.status == 413:  # the rest of the body is discarded, never read
                resp.force_close()
            return resp
        except web.HTTPException as exc:
            if exc.status in (404, 405):
                message = f"Invalid URL ({request.method} {request.path})"
                if exc.status == 405:
                    message = f"{request.method} is not allowed on {request.path}"
                body = error_body(exc.status, message, None,
                                  "unknown_url" if exc.status == 404 else "method_not_allowed")
            else:
                body = error_body(exc.status, exc.text or exc.reason, None, None)
            return web.json_response(body, status=exc.status,
                                     headers={k: v for k, v in exc.headers.items()
                                              if k.lower() == "allow"})
        except Exception as exc:  # noqa: BLE001 - the caller gets a 500 naming the error
            return web.json_response(error_body(500, f"{type(exc).__name__}: {exc}", None, None),
                                     status=500)

    return errors


class ServerThread:
    """Run ``make_app()`` (an ``aiohttp.web.Application``) on ``host:port`` in a thread.

    ``port=0`` picks a free port; :attr:`port` and :attr:`url` hold the bound one after
    :meth:`start`. :meth:`call` runs a coroutine on the server's loop from another thread.
    ``idle_timeout_s``: a connection with no request being handled (one that never finishes
    its headers, or an idle keep-alive one) is closed after this many seconds; ``None``:
    aiohttp's default (an hour).
    """

    def __init__(self, make_app: Callable[[], Any], host: str, port: int, name: str,
                 idle_timeout_s: float | None = None) -> None:
        self._make_app = make_app
        self._idle_timeout_s = idle_timeout_s
        self.host, self.port, self.name = host, int(port), name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"{self.name}: server did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError(
                f"{self.name}: cannot serve on {self.host}:{self.port}: {self._error}"
            ) from self._error
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

    async def _serve(self) -> None:
        from aiohttp import web

        # aiohttp's keep-alive timer starts with the connection and closes it while no
        # request is being handled, which is also a connection stuck in its headers
        kwargs = {} if self._idle_timeout_s is None else {"keepalive_timeout":
                                                            self._idle_timeout_s}
        self._runner = web.AppRunner(self._make_app(), access_log=None, **cast(Any, kwargs))
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(cast(Any, site._server).sockets[0].getsockname()[1])  # the bound port (port 0)

    def call(self, coro: Awaitable[Any], timeout: float | None = None) -> Any:
        """Run ``coro`` on the server's loop and wait for its result."""
        if self._loop is None:
            raise RuntimeError(f"{self.name}: not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._loop = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class HttpError(RuntimeError):
    """A non-2xx answer; ``status`` and the decoded ``body`` are kept."""

    def __init__(self, status: int, body: Any, url: str) -> None:
        self.status, self.body, self.url = status, body, url
        super().__init__(f"HTTP {status} from {url}: {body}")


class JsonClient:
    """``client.request("POST", "/path", {...})`` -> decoded JSON, with the bearer token."""

    def __init__(self, base_url: str, token: str, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None, timeout: float | None = None) -> Any:
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw.decode(errors="replace")
            raise HttpError(exc.code, payload, url) from None
        return json.loads(raw) if raw else None

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, {} if body is None else body, **kw)
