"""Per-process state of the plugin: the ``args`` namespace and the /generate endpoint.

One :class:`Runtime` per resolved config object and process (a Ray worker rebuilds its own).
The endpoint starts in the process that holds the rollout manager, the first time slime code
there may need it, and stops when the run ends; ``args.sglang_router_ip`` / ``_port`` name it.
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import Any

from slime_compat.args import build_args
from slime_compat.config import SECTION


class Runtime:
    def __init__(self, config: Any) -> None:
        from slime_compat.misc import clear_singletons

        clear_singletons()  # slime's GenerateState & co. belong to the previous run's args
        self.config = config
        self.section = config.section(SECTION)
        self.args = build_args(config)
        self.server: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self.step = -1  # last rollout id seen by slime_before_train (slime's rollout_id)

    def ensure_server(self) -> Any:
        """Start the endpoint if it is wanted and this process has rollout engines."""
        if self.server is not None or not self.section.serves_generate():
            return self.server
        with self._lock:
            if self.server is None and engine_clients():
                from slime_compat.server import GenerateServer

                self.server = GenerateServer(engine_clients, self.tokenizer,
                                             port=self.section.router_port).start()
                self.args.sglang_router_ip = self.server.host
                self.args.sglang_router_port = self.server.port
                print(f"slime_compat: SGLang-compatible /generate at {self.server.url} "
                      "(args.sglang_router_ip/port)", file=sys.stderr, flush=True)
                self._init_real_http_client()
        return self.server

    def _init_real_http_client(self) -> None:
        """With THUDM/slime installed, its ``http_utils.post`` goes through a module-level
        client that slime's RolloutManager creates at start (``init_http_client(args)``);
        nothing else here would, and every POST would fail on ``None.post``."""
        from slime_compat.shim import mode

        if mode() != "real":
            return
        try:
            from slime.utils import http_utils
        except ImportError:
            return
        init = getattr(http_utils, "init_http_client", None)
        if init is not None:
            init(self.args)

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from slime_core.api import load_tokenizer

            self._tokenizer = load_tokenizer(self.config.model)
        return self._tokenizer

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop()


_current: Runtime | None = None
# this process's rollout engine clients (slime_rollout_engines_ready; none on trainer ranks):
def engine_clients() -> list[Any]:
    """The rollout manager's engine clients in this process (its run context; per process, not
    per Runtime, since a config copy, an eval dataset's, gets its own Runtime)."""
    from slime_core.api import run_context

    return list(run_context().engine_clients)


def runtime(config: Any) -> Runtime:
    """The runtime of ``config`` in this process (rebuilt when the config object changes)."""
    global _current
    if _current is None or _current.config is not config:
        if _current is not None:
            _current.stop()
        _current = Runtime(config)
    return _current


def current() -> Runtime:
    """The runtime of the run in progress (for shim functions, which get only ``args``)."""
    if _current is None:
        raise RuntimeError("slime_compat: no run in progress in this process")
    return _current


def shutdown() -> None:
    global _current
    if _current is not None:
        _current.stop()
    _current = None


atexit.register(shutdown)
