"""``cuda_graph_capture``: captures on two threads at once (the trainer's and a rollout
engine's under one-step-off) take turns, and each graph replays its own thread's work. Needs
a CUDA device (skipped elsewhere)."""

from __future__ import annotations

import threading

import pytest
import torch
from slime_core.api import cuda_graph_capture

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _captured(scale: float, out: dict[float, object], start: threading.Barrier) -> None:
    x = torch.full((256, 256), 1.0, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = x @ x  # warm-up (cuBLAS's workspace) outside the capture
        torch.cuda.current_stream().synchronize()
        start.wait()
        graph = torch.cuda.CUDAGraph()
        with cuda_graph_capture(graph):
            for _ in range(50):
                y = torch.tanh(x @ x * scale)
        x.fill_(0.5)
        graph.replay()
        torch.cuda.current_stream().synchronize()
    out[scale] = (y.mean().item(), torch.tanh(torch.full((256, 256), 0.5, device="cuda")
                                              @ torch.full((256, 256), 0.5, device="cuda")
                                              * scale).mean().item())


def test_two_threads_capture_in_turn_and_replay_their_own_work():
    out: dict[float, object] = {}
    start = threading.Barrier(2)
    threads = [threading.Thread(target=_captured, args=(s, out, start)) for s in (1e-3, 2e-3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for scale in (1e-3, 2e-3):
        got, want = out[scale]
        assert got == pytest.approx(want, rel=1e-3)
