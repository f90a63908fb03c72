"""One CUDA graph capture at a time in a process.

torch allows only one capture underway in a process, and every ``torch.cuda.graph`` without a
stream of its own captures on one class-wide stream. The trainer's graphs
(``train.cuda_graphs``) and the local engine's decode graphs (``rollout.cuda_graphs``) are
captured on different threads when a schedule generates while the trainer trains
(one-step-off on one GPU): two captures at once would record each other's work into one
graph. Every capture of slime goes through :func:`cuda_graph_capture`, which holds one
process-wide lock for the capture. Work outside a capture (replays, eager kernels on other
streams, other threads) goes on beside it: the capture's error mode is ``thread_local``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

_LOCK = threading.RLock()


@contextlib.contextmanager
def cuda_graph_capture(graph: torch.cuda.CUDAGraph, pool: Any = None) -> Iterator[None]:
    """Capture the CUDA work inside into ``graph`` (in the memory pool ``pool``):
    ``torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local")`` under the
    process's capture lock, so that no other capture of slime (another thread's) is underway
    at the same time; a capture waits for one in progress on another thread."""
    with _LOCK, torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        yield
