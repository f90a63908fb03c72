"""Helpers of the tests whose runs are fed by agent workers through the rollout buffer."""

from __future__ import annotations

import socket
import threading
from typing import Any


def free_port() -> int:
    """A port free on 127.0.0.1 now (a run's service binds it, and workers know it first)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers(url: str, token: str, n: int) -> tuple[list[Any], list[threading.Thread],
                                                           threading.Event]:
    """``n`` reference workers (``BufferWorker`` running the calculator agent) on threads,
    pulling jobs from the rollout buffer at ``url`` until the returned event is set."""
    from slime_agent.tools import CALCULATOR_SCHEMA, calculator
    from slime_agent.worker import BufferWorker, tool_agent_episode

    schema = {"type": "function", "function": {"name": "calculator",
                                               "parameters": CALCULATOR_SCHEMA}}
    stop = threading.Event()
    workers = [BufferWorker(url, token, tool_agent_episode({"calculator": (schema, calculator)}),
                            poll_s=0.5) for _ in range(n)]
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    return workers, threads, stop
