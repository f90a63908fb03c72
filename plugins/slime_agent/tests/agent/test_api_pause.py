"""The agent API held for a weight update (fully-async mode with the rollout buffer): a call
in flight is aborted at the pause and continued after it with the rest of its budget and the
new weights, as one answer; requests that arrive meanwhile wait; a stop string across the
joint ends the answer where it completes. A real aiohttp server on 127.0.0.1 and the real
:class:`EngineClient`; the engine is scripted (below) because a model cannot be made to be
mid-answer at a chosen token."""

from __future__ import annotations

import string
import threading
import time
from typing import Any

import pytest
from slime_agent.api import AgentApiServer
from slime_agent.http import JsonClient
from slime_hookspecs import GenerateOutput, Sample, SamplingParams

STREAM = string.ascii_letters  # no pair repeats within one answer: stop strings are unique


class StallingEngine:
    """Emits ``STREAM[i % 52]`` at absolute position ``i`` of the sequence (prompt included),
    so a continued answer reads on exactly where the first part stopped. With ``stall_at = k``
    the next call stops after k ids and waits for an abort (as a long generation would be
    caught by a weight update). Stop strings, budget and abort follow the local engine's
    contract: abort ends the calls that have started; stop strings are checked on each call's
    own generated text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids = [tokenizer.convert_tokens_to_ids(c) for c in STREAM]
        self.version = 0
        self.calls: list[tuple[int, int, int]] = []  # prompt length, budget, weight version
        self.lock = threading.Lock()
        self.stall_at: int | None = None
        self.stalled = threading.Event()
        self._epoch = 0

    def generate(self, prompts: list[list[int]],
                 params: list[SamplingParams]) -> list[GenerateOutput]:
        epoch = self._epoch
        outs = []
        with self.lock:
            for p, sp in zip(prompts, params, strict=True):
                self.calls.append((len(p), sp.max_new_tokens, self.version))
                stall, self.stall_at = self.stall_at, None
                ids: list[int] = []
                reason = "length"
                while len(ids) < sp.max_new_tokens:
                    if self._epoch != epoch:
                        reason = "abort"
                        break
                    if stall is not None and len(ids) == stall:
                        self.stalled.set()
                        while self._epoch == epoch:
                            time.sleep(0.005)
                        continue
                    ids.append(self.ids[(len(p) + len(ids)) % len(self.ids)])
                    text = self.tokenizer.decode(ids)
                    if any(s in text for s in sp.stop if s):
                        reason = "stop"
                        break
                outs.append(GenerateOutput(ids, [-0.5] * len(ids), reason, self.version))
        return outs

    def abort(self) -> None:
        self._epoch += 1

    def weight_version(self) -> int:
        return self.version

    def update_weights(self, weights: Any, version: int) -> None:
        with self.lock:  # waits for a generate call, as the local engine's lock does
            self.version = version


def ask(c: JsonClient, session: str, out: dict[str, Any], **extra: Any) -> threading.Thread:
    def run() -> None:
        out[session] = c.post("/chat/completions", {
            "model": "slime", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 30, **extra}, headers={"X-Session-Id": session})

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def paused_mid_answer(srv: AgentApiServer, engine: StallingEngine, c: JsonClient,
                      k: int, **extra: Any) -> tuple[dict[str, Any], threading.Thread]:
    """Session ``s1`` asks, the engine stalls after ``k`` ids, the API is paused."""
    answers: dict[str, Any] = {}
    engine.stall_at = k
    t = ask(c, "s1", answers, **extra)
    assert engine.stalled.wait(10)
    srv.pause()
    assert not engine.lock.locked()  # pause() returned: no engine call runs
    return answers, t


@pytest.mark.parametrize("mask", [False, True])
def test_a_call_in_flight_at_a_pause_continues_with_the_new_weights(tokenizer, mask) -> None:
    engine = StallingEngine(tokenizer)
    srv = AgentApiServer([engine], tokenizer, max_tokens=30, mask_offpolicy=mask).start()
    try:
        c = JsonClient(srv.url, srv.token)
        answers, first = paused_mid_answer(srv, engine, c, k=7)
        second = ask(c, "s2", answers)  # arrives during the update: waits
        time.sleep(0.3)
        assert len(engine.calls) == 1, engine.calls  # nothing reached the engine meanwhile
        engine.update_weights({}, 1)
        srv.resume()
        first.join(10)
        second.join(10)
        a = answers["s1"]
        assert a["choices"][0]["finish_reason"] == "length"
        assert a["usage"]["completion_tokens"] == 30 and a["weight_version"] == 1
        p0 = engine.calls[0][0]
        # the continuation: prompt + the 7 ids, the other 23 of the budget, the new weights
        assert (p0 + 7, 23, 1) in engine.calls[1:], engine.calls
        assert answers["s2"]["weight_version"] == 1 and srv.continued == 1
        s = Sample.from_dict(c.post("/sessions/s1/finish", {})["samples"][0])
        assert s.weight_versions == [0, 1] and s.response_length == 30
        # one answer, read on where it stopped: no id lost or repeated at the joint
        assert s.tokens[p0:] == [engine.ids[(p0 + i) % 52] for i in range(30)]
        assert s.loss_mask == ([0] * 7 + [1] * 23 if mask else [1] * 30)
        assert len(s.rollout_log_probs) == 30
        s2 = Sample.from_dict(c.post("/sessions/s2/finish", {})["samples"][0])
        assert s2.weight_versions == [1] and s2.response_length == 30
    finally:
        srv.resume()
        srv.stop()


def test_a_stop_string_across_the_joint_ends_the_answer(tokenizer) -> None:
    engine = StallingEngine(tokenizer)
    srv = AgentApiServer([engine], tokenizer, max_tokens=30).start()
    try:
        c = JsonClient(srv.url, srv.token)
        probe: dict[str, Any] = {}
        ask(c, "probe", probe).join(10)
        p0 = engine.calls[0][0]  # the prompt's length, the same for the next request
        # the last id before the pause and the first after it: neither part holds it whole
        stop = STREAM[(p0 + 4) % 52] + STREAM[(p0 + 5) % 52]
        answers, t = paused_mid_answer(srv, engine, c, k=5, stop=[stop])
        srv.resume()
        t.join(10)
        a = answers["s1"]
        assert a["choices"][0]["finish_reason"] == "stop"
        assert a["usage"]["completion_tokens"] == 6
        assert a["choices"][0]["message"]["content"].endswith(stop)
    finally:
        srv.stop()


def test_an_abort_without_a_pause_reaches_the_client(tokenizer) -> None:
    """Aborts of the rollout manager's own (a full batch in the synchronous modes) are not
    continued: the client sees the aborted answer, as before."""
    engine = StallingEngine(tokenizer)
    srv = AgentApiServer([engine], tokenizer, max_tokens=30).start()
    try:
        c = JsonClient(srv.url, srv.token)
        answers: dict[str, Any] = {}
        engine.stall_at = 3
        t = ask(c, "s1", answers)
        assert engine.stalled.wait(10)
        engine.abort()
        t.join(10)
        assert answers["s1"]["choices"][0]["finish_reason"] == "abort"
        assert answers["s1"]["usage"]["completion_tokens"] == 3 and srv.continued == 0
    finally:
        srv.stop()


def test_requests_held_at_the_end_fail_instead_of_hanging(tokenizer) -> None:
    """The run ends during a pause (its last weight update): the held request gets a 503
    at once, so a worker is not left waiting for its client's timeout."""
    from slime_agent.http import HttpError

    engine = StallingEngine(tokenizer)
    srv = AgentApiServer([engine], tokenizer, max_tokens=30).start()
    c = JsonClient(srv.url, srv.token)
    srv.pause()
    errors: list[Exception] = []

    def held() -> None:
        try:
            c.post("/chat/completions", {"model": "slime", "max_tokens": 5,
                                         "messages": [{"role": "user", "content": "hi"}]})
        except HttpError as exc:
            errors.append(exc)

    t = threading.Thread(target=held, daemon=True)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    srv.stop()
    t.join(10)
    assert time.monotonic() - t0 < 5 and not t.is_alive()
    assert [e.status for e in errors] == [503] and not engine.calls


def test_a_rollout_hold_holds_the_generators_sessions_only(tokenizer) -> None:
    """``hold_rollouts`` (the hook ``slime_hold_rollouts`` of a fully-async
    ``agent.entrypoint`` run) holds the tracked sessions (the generator's episodes): a call
    caught in flight goes on after the release with the new weights as one answer, and with
    ``mask_offpolicy`` a later call of the episode masks what came before the update; an
    untracked session (an evaluation's episode) is served during the hold; ``end`` refuses
    the held calls (503) instead of leaving them to wait."""
    from slime_agent.http import HttpError

    engine = StallingEngine(tokenizer)
    srv = AgentApiServer([engine], tokenizer, max_tokens=30, mask_offpolicy=True).start()
    try:
        c = JsonClient(srv.url, srv.token)
        srv.track("s1")
        answers: dict[str, Any] = {}
        engine.stall_at = 4
        first = ask(c, "s1", answers, max_tokens=10)
        assert engine.stalled.wait(10)
        srv.hold_rollouts()
        assert not engine.lock.locked()  # returned: none of the tracked calls runs
        ask(c, "eval", answers, max_tokens=5).join(10)  # untracked: not held
        assert answers["eval"]["weight_version"] == 0 and "s1" not in answers
        engine.update_weights({}, 1)
        srv.release_rollouts()
        first.join(10)
        assert answers["s1"]["choices"][0]["finish_reason"] == "length"
        assert answers["s1"]["usage"]["completion_tokens"] == 10 and srv.continued == 1
        # held between two calls: the episode's next answer is all new weights, and the
        # ids of the older ones before it are masked
        srv.hold_rollouts()
        engine.update_weights({}, 2)
        srv.release_rollouts()
        reply = answers["s1"]["choices"][0]["message"]["content"]
        c.post("/chat/completions", {"model": "slime", "max_tokens": 3, "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": reply},
            {"role": "user", "content": "hi"}]}, headers={"X-Session-Id": "s1"})
        (s,) = [Sample.from_dict(d) for d in c.post("/sessions/s1/finish", {})["samples"]]
        assert s.weight_versions == [0, 1, 2]
        model = [i for i, lp in enumerate(s.rollout_log_probs) if lp != 0.0]
        assert [s.loss_mask[i] for i in model] == [0] * 10 + [1] * 3
        # the end of the run: a held call is refused at once
        srv.track("s3")
        srv.hold_rollouts()
        refused: list[Exception] = []

        def held() -> None:
            try:
                c.post("/chat/completions", {"model": "slime", "max_tokens": 5,
                                             "messages": [{"role": "user", "content": "hi"}]},
                       headers={"X-Session-Id": "s3"})
            except HttpError as exc:
                refused.append(exc)

        t = threading.Thread(target=held, daemon=True)
        t.start()
        time.sleep(0.3)
        assert t.is_alive()  # held
        srv.release_rollouts(end=True)
        t.join(10)
        assert not t.is_alive() and refused and "503" in str(refused[0])
    finally:
        srv.release_rollouts()
        srv.stop()
