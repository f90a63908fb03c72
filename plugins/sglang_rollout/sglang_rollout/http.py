"""HTTP to SGLang servers: one aiohttp session on a private event-loop thread per engine.

The :class:`~slime_hookspecs.RolloutEngine` protocol is synchronous (the core calls
``generate`` from a worker thread and ``abort`` from its event loop), so each engine owns a
:class:`LoopThread`; many ``/generate`` requests then share one connection pool concurrently,
and ``abort`` can be sent while a ``generate`` call is waiting.

Every failure names the server URL, the method and endpoint, and what came back: a non-2xx
status (:class:`SGLangHTTPError`, with the body), a 2xx body that is not JSON where JSON is
expected (:class:`~sglang_rollout.api.SGLangResponseError`), or no answer at all
(:class:`SGLangConnectionError`, with the transport error or the timeout).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp

from sglang_rollout.api import SGLangResponseError, clip

T = TypeVar("T")


class SGLangHTTPError(RuntimeError):
    """A non-2xx answer."""

    def __init__(self, url: str, method: str, endpoint: str, status: int, body: str) -> None:
        self.url, self.method, self.endpoint, self.status, self.body = url, method, endpoint, status, body
        super().__init__(f"SGLang server {url}: {method} {endpoint} answered HTTP {status}: "
                         f"{clip(body) or '(empty body)'}")


class SGLangConnectionError(ConnectionError):
    """No answer (refused, reset, timed out)."""


class LoopThread:
    """An asyncio loop running in a daemon thread; :meth:`run` executes a coroutine on it."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError(f"{self._thread.name}: the engine was shut down")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(f"{self._thread.name}: run() called from its own loop (deadlock)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


class ServerClient:
    """Calls to one SGLang server (or sglang-router) at ``url``; use from the loop's thread."""

    def __init__(self, url: str, api_key: str = "") -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # no connection cap here: the engine bounds in-flight requests itself
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), headers=self.headers)
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def call(self, method: str, endpoint: str, body: dict[str, Any] | None = None,
                   timeout: float = 60.0, parse: str = "json") -> tuple[int, Any]:
        """``(status, payload)``; payload is parsed JSON (``parse="json"``, empty body -> None)
        or the text (``parse="text"``). Raises on non-2xx, bad JSON and transport errors."""
        try:
            async with self._sess().request(
                method, self.url + endpoint, json=body,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                text = await resp.text()
                status = resp.status
        except asyncio.TimeoutError as exc:
            raise SGLangConnectionError(f"SGLang server {self.url}: {method} {endpoint} got no "
                                        f"answer within {timeout:g} s") from exc
        except aiohttp.ClientError as exc:
            raise SGLangConnectionError(f"SGLang server {self.url}: {method} {endpoint} failed: "
                                        f"{type(exc).__name__}: {exc}") from exc
        if not 200 <= status < 300:
            raise SGLangHTTPError(self.url, method, endpoint, status, text)
        if parse == "text":
            return status, text
        if not text.strip():
            return status, None
        try:
            return status, json.loads(text)
        except json.JSONDecodeError as exc:
            raise SGLangResponseError(
                f"SGLang server {self.url}: {method} {endpoint} answered HTTP {status} with "
                f"malformed JSON ({exc.msg} at char {exc.pos}): {clip(text)}"
            ) from exc

    async def ok(self, method: str, endpoint: str, timeout: float) -> bool:
        """True on a 2xx answer; False on any other answer or no answer (health checks)."""
        try:
            await self.call(method, endpoint, None, timeout, parse="text")
            return True
        except (SGLangHTTPError, SGLangConnectionError):
            return False
