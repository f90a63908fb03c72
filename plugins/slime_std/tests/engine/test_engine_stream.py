"""With ``rollout.engine_stream``, a GPU engine under a schedule that generates while the
trainer trains generates on a CUDA stream of its own (``LocalEngine._on_stream``), so the
decode overlaps the training on the device; the synchronous schedule and the CPU keep the
caller's stream.

Which stream waits for which is checked on the CPU with stand-in streams. The overlap itself
needs a GPU: there a generate on a worker thread, beside a main thread that keeps the default
stream busy with products and then rewrites the weights, gives what the same calls give one
after another (run on the device by ``bench/h200_smollm2.sh gputests``)."""

from __future__ import annotations

import threading

import pytest
import torch
from slime_hookspecs import SamplingParams

GREEDY = [SamplingParams(temperature=0.0, max_new_tokens=16, ignore_eos=True)] * 4
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _streamed(make_cuda_engine, **run):
    return make_cuda_engine(run=run, rollout={"engine_stream": True})


def test_the_cpu_and_the_synchronous_schedule_keep_the_callers_stream(make_engine):
    on = {"engine_stream": True}
    assert make_engine(run={"async_rollout": True}, rollout=on)._stream is None  # a CPU
    assert make_engine(rollout=on)._stream is None


def _generate_on_a_worker(engine, busy=None, x=None):
    """``engine.generate`` on a new thread, the main thread keeping the default stream busy
    with products meanwhile (``busy`` @ ``x``, 200 times, when given); the outputs and
    ``busy``, or the worker's exception raised here (a failing worker names its own error,
    not a missing result)."""
    out: dict[str, object] = {}

    def work():
        try:
            out["r"] = engine.generate(PROMPTS, GREEDY)
        except BaseException as e:  # re-raised on the main thread
            out["error"] = e

    worker = threading.Thread(target=work)
    worker.start()
    if busy is not None:
        for _ in range(200):
            busy = torch.tanh(busy @ x) * 0.01
    worker.join()
    if "error" in out:
        raise out["error"]
    return out["r"], busy


@cuda
def test_only_an_overlapping_schedule_gets_a_stream(make_cuda_engine):
    assert _streamed(make_cuda_engine)._stream is None
    stream = _streamed(make_cuda_engine, async_rollout=True)._stream
    assert stream is not None and stream.priority < 0  # above the default stream's 0
    assert _streamed(make_cuda_engine, rollout_mode="one_step_off")._stream is not None


@cuda
def test_a_worker_generate_beside_busy_training_matches_the_serial_calls(make_cuda_engine):
    serial = _streamed(make_cuda_engine)
    engine = _streamed(make_cuda_engine, async_rollout=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    new = {k: v + 0.5 * torch.randn(v.shape, device=v.device, generator=gen)
           for k, v in serial.state_dict().items()}
    want = serial.generate(PROMPTS, GREEDY)
    serial.update_weights(new, 1)
    want_after = serial.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in want_after] != [o.token_ids for o in want]

    x = torch.randn(2048, 2048, device="cuda")
    for _ in range(3):  # the static decoders captured (their first call), then replayed
        got, busy = _generate_on_a_worker(engine, x, x)
        assert [o.token_ids for o in got] == [o.token_ids for o in want]
        torch.testing.assert_close(torch.tensor([o.log_probs for o in got]),
                                   torch.tensor([o.log_probs for o in want]), atol=1e-5, rtol=0)
    # a weight update on the main thread's stream, queued behind more products: the next
    # worker generate reads the new weights
    for _ in range(200):
        busy = torch.tanh(busy @ x) * 0.01
    engine.update_weights(new, 1)
    got, _ = _generate_on_a_worker(engine)
    assert [o.token_ids for o in got] == [o.token_ids for o in want_after]
    torch.cuda.synchronize()
    assert torch.isfinite(busy).all()


class _Stream:
    """A stand-in stream that records the waits between streams (``(waiter, waited)``)."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: _Stream) -> None:
        self.log.append((self.name, other.name))


def test_the_orders_a_stream_engine_keeps(make_engine, monkeypatch):
    """Which stream waits for which (the CPU engine given stand-in streams): a generate runs
    on the engine's stream without waiting for the caller's (it would queue the decode behind
    the training already launched) and the caller's waits for it at the end; a weight update
    waits for the engine's work, and the engine's next work waits for the update."""
    import contextlib

    log: list[tuple[str, str]] = []
    entered: list[str] = []
    engine = make_engine(run={"async_rollout": True})
    engine._stream = _Stream("engine", log)

    @contextlib.contextmanager
    def enter(stream):
        entered.append(stream.name)
        yield

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream("caller", log))
    monkeypatch.setattr(torch.cuda, "stream", enter)
    engine.generate(PROMPTS, GREEDY)
    assert (log, entered) == ([("caller", "engine")], ["engine"])
    log.clear()
    engine.update_weights(engine.state_dict(), 1)
    assert log == [("caller", "engine"), ("engine", "caller")]
    log.clear()
    engine.score_tokens([[5, 6, 7, 8]], [2])
    assert (log, entered) == ([("caller", "engine")], ["engine", "engine"])
