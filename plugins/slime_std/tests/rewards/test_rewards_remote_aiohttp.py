"""The remote reward against a real aiohttp server on 127.0.0.1: back-off between retries,
the per-attempt timeout, and errors that name the URL and the HTTP status."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from aiohttp import web
from slime_hookspecs import Sample
from slime_std.rewards import RemoteRewardError, make_remote_reward

S = Sample(prompt="1+1=", response="2", label="2")


class AiohttpServer:
    """``handler(request_number) -> (status, json_text, delay_s)``; arrival times kept."""

    def __init__(self, handler):
        self.handler, self.arrivals = handler, []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _answer(self, request: web.Request) -> web.Response:
        self.arrivals.append(time.monotonic())
        status, text, delay = self.handler(len(self.arrivals))
        await asyncio.sleep(delay)
        return web.Response(status=status, text=text, content_type="application/json")

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/score", self._answer)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - the bound port
        self.url = f"http://127.0.0.1:{port}/score"

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def score(make_config, url, **kw):
    fn = make_remote_reward(make_config(rollout={"reward_kwargs": {"url": url, **kw}}))
    return asyncio.run(fn(S))


def test_backoff_doubles_between_retries(make_config):
    with AiohttpServer(lambda n: (503, "{}", 0) if n < 4 else (200, '{"reward": 1}', 0)) as srv:
        assert score(make_config, srv.url, retries=3, backoff=0.1, timeout=5) == 1.0
    gaps = [b - a for a, b in zip(srv.arrivals, srv.arrivals[1:], strict=False)]
    assert len(gaps) == 3
    for gap, want in zip(gaps, (0.1, 0.2, 0.4), strict=True):
        assert want <= gap < want + 1.0, gaps


def test_a_slow_server_times_out_per_attempt_and_is_named(make_config):
    with AiohttpServer(lambda n: (200, '{"reward": 1}', 3.0)) as srv:
        t0 = time.monotonic()
        with pytest.raises(RemoteRewardError) as err:
            score(make_config, srv.url, retries=1, backoff=0.0, timeout=0.3)
        elapsed = time.monotonic() - t0
    assert elapsed < 2.5  # two attempts of 0.3 s, not two of 3 s
    assert len(srv.arrivals) == 2
    assert srv.url in str(err.value) and "timed out" in str(err.value).lower()


def test_the_failing_status_is_reported(make_config):
    with AiohttpServer(lambda n: (502, '{"error": "upstream down"}', 0)) as srv:
        with pytest.raises(RemoteRewardError, match="HTTP 502") as err:
            score(make_config, srv.url, retries=2, backoff=0.0, timeout=5)
    assert srv.url in str(err.value) and "upstream down" in str(err.value)
    assert len(srv.arrivals) == 3
    with AiohttpServer(lambda n: (403, '{"error": "bad key"}', 0)) as srv:
        with pytest.raises(RemoteRewardError, match="HTTP 403") as err:
            score(make_config, srv.url, retries=5, backoff=0.0, timeout=5)
    assert len(srv.arrivals) == 1  # a 4xx is not retried: the answer would be the same
    assert srv.url in str(err.value)
