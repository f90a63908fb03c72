"""One CUDA graph capture at a time in a process.

torch documents that only one capture may be underway in a process, and every
``torch.cuda.graph`` without its own stream captures on one class-wide stream. The trainer's
graphs (``train.cuda_graphs``) and the local engine's decode graphs (``rollout.cuda_graphs``)
are captured on different threads when a schedule generates while the trainer trains
(one-step-off on one GPU): two captures at once would record each other's work. Every capture
of slime goes through :func:`cuda_graph_capture`, which takes one process-wide lock and
captures on a stream of the calling thread's own. Work outside a capture (replays, eager
kernels on other streams) goes on beside it: the capture's error mode is ``thread_local``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

_LOCK = threading.RLock()
_STREAMS = threading.local()  # .by_device: device index -> this thread's capture stream


def _capture_stream() -> torch.cuda.Stream:
    by_device: dict[int, torch.cuda.Stream] = getattr(_STREAMS, "by_device", None) or {}
    _STREAMS.by_device = by_device
    index = torch.cuda.current_device()
    if index not in by_device:
        by_device[index] = torch.cuda.Stream(index)
    return by_device[index]


@contextlib.contextmanager
def cuda_graph_capture(graph: torch.cuda.CUDAGraph, pool: Any = None) -> Iterator[None]:
    """Capture the CUDA work inside into ``graph`` (in the memory pool ``pool``, as
    ``torch.cuda.graph``): under the process's capture lock, so no other capture of slime
    (another thread's) is underway at the same time, on a capture stream of the calling
    thread (per device), with ``capture_error_mode="thread_local"`` (other threads keep
    launching). A capture waits for one in progress on another thread."""
    with _LOCK, torch.cuda.graph(graph, pool=pool, stream=_capture_stream(),
                                 capture_error_mode="thread_local"):
        yield
