"""``remote``: ask an HTTP reward server (standard library only).

Request: ``POST <url>`` with JSON ``{"prompt", "response", "label", "metadata"}``
(``Content-Type: application/json``). Answer: ``{"reward": <number or {name: number}>}`` or a
bare number.

Options in ``rollout.reward_kwargs``: ``url`` (required), ``timeout`` (seconds per attempt,
default 10), ``retries`` (extra attempts after the first, default 3), ``backoff`` (seconds
before the first retry, doubled each time, default 0.5), ``headers`` (extra HTTP headers).

Connection errors, timeouts, HTTP 5xx and 429 are retried with exponential back-off; when the
attempts are used up :class:`RemoteRewardError` names the url and the last answer. HTTP 4xx
(other than 429), a non-JSON body or a body without a number fail at once (a retry would get
the same answer). The call is a coroutine; the blocking request runs in a worker thread, so
many samples are scored concurrently.
"""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample


class RemoteRewardError(RuntimeError):
    """The reward server did not give a usable reward."""


def _post(url: str, payload: bytes, timeout: float, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(
        url, data=payload, method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - configured url
            return int(resp.status), resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", errors="replace") if exc.fp is not None else ""
        return int(exc.code), body


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_reward(url: str, body: str) -> float | dict[str, float]:
    """The reward in a server answer, or :class:`RemoteRewardError` quoting the answer."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        raise RemoteRewardError(
            f"reward server {url} answered non-JSON: {body[:300]!r}"
        ) from None
    if _number(data):
        return float(data)
    if isinstance(data, dict):
        if "reward" not in data:
            raise RemoteRewardError(
                f"reward server {url} answered without a 'reward' key: {body[:300]!r}"
            )
        r = data["reward"]
        if _number(r):
            return float(r)
        if isinstance(r, dict) and r and all(_number(v) for v in r.values()):
            return {str(k): float(v) for k, v in r.items()}
    raise RemoteRewardError(
        f"reward server {url} answered {body[:300]!r}; expected {{\"reward\": number}} or a number"
    )


async def remote_reward(
    sample: Sample,
    *,
    url: str,
    timeout: float = 10.0,
    retries: int = 3,
    backoff: float = 0.5,
    headers: dict[str, str] | None = None,
) -> float | dict[str, float]:
    """POST the sample to ``url`` and return its reward (see the module docstring)."""
    payload = json.dumps({
        "prompt": sample.prompt,
        "response": sample.response,
        "label": sample.label,
        "metadata": sample.metadata,
    }, default=str).encode("utf-8")
    last = ""
    for attempt in range(retries + 1):
        try:
            status, body = await asyncio.to_thread(_post, url, payload, timeout, headers or {})
        except (OSError, urllib.error.URLError) as exc:  # refused, reset, timeout, DNS
            last = f"{type(exc).__name__}: {exc}"
        else:
            if 200 <= status < 300:
                return parse_reward(url, body)
            if status < 500 and status != 429:
                raise RemoteRewardError(f"reward server {url} answered HTTP {status}: {body[:300]!r}")
            last = f"HTTP {status}: {body[:300]!r}"
        if attempt < retries:
            await asyncio.sleep(backoff * 2**attempt)
    raise RemoteRewardError(
        f"reward server {url} failed {retries + 1} attempt(s) (rollout.reward_kwargs.retries="
        f"{retries}); last answer: {last}"
    )


def make_remote_reward(config: Any) -> Callable[[Sample], Any]:
    """Record factory: reads ``rollout.reward_kwargs`` (``url`` required)."""
    kw = dict(config.rollout.reward_kwargs)
    url = kw.get("url")
    if not url or not isinstance(url, str):
        raise ValueError(
            "the remote reward needs rollout.reward_kwargs.url (e.g. "
            "rollout.reward_kwargs = {url = \"http://127.0.0.1:8000/reward\"})"
        )
    timeout = float(kw.get("timeout", 10))
    retries = int(kw.get("retries", 3))
    backoff = float(kw.get("backoff", 0.5))
    if timeout <= 0:
        raise ValueError("rollout.reward_kwargs.timeout must be > 0")
    if retries < 0 or backoff < 0:
        raise ValueError("rollout.reward_kwargs.retries and .backoff must be >= 0")
    headers = {str(k): str(v) for k, v in dict(kw.get("headers", {})).items()}
    return functools.partial(
        remote_reward, url=url, timeout=timeout, retries=retries, backoff=backoff, headers=headers
    )
