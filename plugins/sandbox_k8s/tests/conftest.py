"""Test setup: import paths, and a kmock Kubernetes API emulator on 127.0.0.1.

kmock (PyPI) is an in-memory Kubernetes API emulator built on aiohttp: it stores objects
posted to it, serves get / list / watch / patch / delete with Kubernetes status errors (404,
409), and answers API discovery. It runs here in its own thread with its own event loop, so
the blocking ``kubernetes`` client (called from ``asyncio.to_thread`` in the sandbox, or
directly by ``sweep``) talks to it over real HTTP on a loopback port.

What kmock does not do, and these tests therefore do not claim: it schedules nothing (no
kubelet: pods get no status unless a test patches one in, as a kubelet would), it ignores
``labelSelector`` on list (it returns every pod of the namespace), it fills in no
``creationTimestamp``, and it does not speak the exec websocket subprotocol.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator

import pytest

_REPO = Path(__file__).resolve().parents[3]
for _p in (_REPO / "hookspecs", _REPO / "plugins" / "sandbox_k8s"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


class KmockCluster:
    """A running kmock emulator: its URL, the handler (request log, objects) and a client."""

    def __init__(self) -> None:
        self.url = ""
        self.handler: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="kmock", daemon=True)

    def _serve(self) -> None:
        import kmock

        async def main() -> None:
            async with kmock.KubernetesEmulator() as handler, kmock.Server(handler) as server:
                with warnings.catch_warnings():  # kmock 0.8 uses importlib.resources.read_binary
                    warnings.simplefilter("ignore", DeprecationWarning)
                    handler.resources.load_bundled()  # discovery of the built-in resources
                self.handler, self.url = handler, str(server.url).rstrip("/")
                self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()

    def start(self) -> KmockCluster:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"kmock did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def api_client(self) -> Any:
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def requests(self) -> list[Any]:
        """Every request the emulator received, in order (kmock's request log)."""
        return list(self.handler)


@pytest.fixture()
def cluster() -> Iterator[KmockCluster]:
    pytest.importorskip("kubernetes")
    pytest.importorskip("kmock")
    c = KmockCluster().start()
    try:
        yield c
    finally:
        c.stop()
