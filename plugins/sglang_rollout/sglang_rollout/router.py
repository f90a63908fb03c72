"""sglang-router's worker API, as slime uses it: ``POST /workers`` to add a server,
``GET /workers`` to list them (``{"workers": [{"id", "url", ...}]}``), ``DELETE /workers/{id}``
to remove one. Adding is asynchronous in the router (it health-checks the worker first), so
:func:`register` waits until the worker is listed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sglang_rollout.api import SGLangResponseError, clip
from sglang_rollout.http import ServerClient


def _workers(where: str, data: Any) -> list[dict[str, Any]]:
    workers = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(workers, list) or not all(isinstance(w, dict) for w in workers):
        raise SGLangResponseError(f"{where}: expected {{\"workers\": [...]}}, got {clip(repr(data))}")
    return workers


async def list_workers(router: ServerClient, timeout: float) -> list[dict[str, Any]]:
    _, data = await router.call("GET", "/workers", None, timeout)
    return _workers(f"sglang-router {router.url}: GET /workers", data)


async def register(router: ServerClient, worker_url: str, timeout: float,
                   wait_s: float) -> None:
    """Add ``worker_url`` as a regular worker and wait until the router lists it."""
    if any(w.get("url") == worker_url for w in await list_workers(router, timeout)):
        return
    await router.call("POST", "/workers", {"url": worker_url, "worker_type": "regular"}, timeout)
    deadline = time.monotonic() + wait_s
    while True:
        listed = await list_workers(router, timeout)
        if any(w.get("url") == worker_url for w in listed):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"sglang-router {router.url} did not list worker {worker_url} within "
                f"{wait_s:g} s after POST /workers; it lists {[w.get('url') for w in listed]}"
            )
        await asyncio.sleep(0.5)


async def deregister(router: ServerClient, worker_url: str, timeout: float) -> bool:
    """Remove ``worker_url`` from the router; False if it was not listed."""
    for w in await list_workers(router, timeout):
        if w.get("url") == worker_url and w.get("id") is not None:
            await router.call("DELETE", f"/workers/{w['id']}", None, timeout)
            return True
    return False
