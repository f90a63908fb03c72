"""Event-loop helpers behind the shim's ``slime.utils.async_utils`` and ``http_utils``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    """One long-lived loop on a daemon thread (slime runs its rollout coroutines on one)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="slime-compat-async",
                             daemon=True).start()
    return _loop


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """slime's ``slime.utils.async_utils.run``: the coroutine's result, from sync code."""
    loop = background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        raise RuntimeError("run() called from the background loop itself; await the coroutine")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


async def post(url: str, payload: Any, max_retries: int = 60, headers: dict[str, str] | None = None) -> Any:
    """slime's ``http_utils.post``: JSON in, JSON (or text) out, retried once a second on
    errors up to ``max_retries`` times, as slime does."""
    import aiohttp

    last: Exception | None = None
    for attempt in range(max(1, max_retries)):
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None),
                                             trust_env=False) as session:
                async with session.post(url, json=payload or {}, headers=headers) as resp:
                    text = await resp.text()
                    if resp.status >= 400:
                        raise aiohttp.ClientResponseError(
                            resp.request_info, resp.history, status=resp.status,
                            message=f"{text[:500]}", headers=resp.headers)
                    try:
                        import json

                        return json.loads(text)
                    except ValueError:
                        return text
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            last = exc
            # a 4xx is the request's fault: retrying cannot help (slime retries everything;
            # fail fast here so a bad payload shows its error at once)
            if isinstance(exc, aiohttp.ClientResponseError) and 400 <= exc.status < 500:
                raise
            if attempt + 1 < max_retries:
                await asyncio.sleep(1)
    assert last is not None
    raise last


async def get(url: str) -> Any:
    import aiohttp

    async with aiohttp.ClientSession(trust_env=False) as session:
        async with session.get(url) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)
