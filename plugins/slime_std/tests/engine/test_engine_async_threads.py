"""``rollout.async_threads``: a generate that overlaps training (an async rollout on a worker
thread) runs with that many torch intra-op threads, and nobody else's count changes."""

from __future__ import annotations

import threading

import pytest
import torch
from slime_hookspecs import SamplingParams
from slime_std.engine import local_engine

PARAMS = [SamplingParams(temperature=1.0, max_new_tokens=3, ignore_eos=True, seed=1)]


@pytest.fixture
def seen_threads(monkeypatch):
    """torch.get_num_threads() as the decode loop sees it, one entry per chunk."""
    seen: list[int] = []
    decode = local_engine.decode

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return decode(*args, **kwargs)

    monkeypatch.setattr(local_engine, "decode", spy)
    return seen


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def in_worker(fn):
    out: dict[str, object] = {}

    def run() -> None:
        out["result"] = fn()
        out["after"] = torch.get_num_threads()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out


def test_worker_generate_uses_async_threads_and_restores(make_engine, seen_threads, two_threads):
    engine = make_engine(run={"async_rollout": True}, rollout={"async_threads": 1})
    out = in_worker(lambda: engine.generate([[5, 6, 7]], PARAMS))
    assert seen_threads == [1]
    assert out["after"] == 2  # the worker's own count is restored
    assert torch.get_num_threads() == 2  # the main thread (the trainer's) never changed
    # same tokens as on the main thread: only the thread count differs
    main = engine.generate([[5, 6, 7]], PARAMS)
    assert seen_threads == [1, 2]
    assert out["result"][0].token_ids == main[0].token_ids


@pytest.mark.parametrize("sections", [
    {"run": {"async_rollout": True}},  # async_threads 0: unchanged
    {"rollout": {"async_threads": 1}},  # synchronous run: generate never overlaps training
    {"run": {"async_rollout": True, "executor": "ray"}, "rollout": {"async_threads": 1}},
], ids=["threads-0", "sync", "ray-executor"])
def test_other_runs_keep_the_thread_count(make_engine, seen_threads, two_threads, sections):
    engine = make_engine(**sections)
    in_worker(lambda: engine.generate([[5, 6, 7]], PARAMS))
    assert seen_threads == [2]


def test_negative_async_threads_is_rejected(engine_config):
    with pytest.raises(ValueError, match="rollout.async_threads"):
        engine_config(rollout={"async_threads": -1})
