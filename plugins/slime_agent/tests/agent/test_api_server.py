"""The agent API: a real aiohttp server on 127.0.0.1 in front of a real local engine.

Checked: bearer-token auth, session recording (prompt ids = chat-template rendering, the
model's ids verbatim with their log-probs, the new messages tokenized as a delta with loss
mask 0), finish -> Sample(s), tool calls returned in OpenAI shape, and request errors.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from slime_agent import chat
from slime_agent.api import AgentApiServer
from slime_agent.http import HttpError, JsonClient
from slime_agent.parsers import HermesParser
from slime_hookspecs import Sample, Status


@pytest.fixture(scope="module")
def engine_and_config(tiny_local_engine):
    engine, cfg, _ = tiny_local_engine({"max_new_tokens": 12})
    return engine, cfg


@pytest.fixture
def server(engine_and_config):
    engine, cfg = engine_and_config
    srv = AgentApiServer([engine], engine.tokenizer, max_tokens=12,
                         tool_parser=HermesParser()).start()
    yield srv
    srv.stop()


def client(srv: AgentApiServer, token: str | None = None) -> JsonClient:
    return JsonClient(srv.url, srv.token if token is None else token)


def chat_call(c: JsonClient, messages: list[dict[str, Any]], session: str | None = None,
              **extra: Any) -> dict[str, Any]:
    headers = {"X-Session-Id": session} if session else {}
    return c.post("/chat/completions", {"model": "slime", "messages": messages,
                                        "max_tokens": 8, "temperature": 1.0, **extra},
                  headers=headers)


def test_bearer_token_is_required(server):
    assert len(server.token) >= 32  # generated: none was configured
    url = server.url.removesuffix("/v1")
    with urllib.request.urlopen(f"{url}/health") as r:  # the only open path
        assert json.loads(r.read())["ok"] is True
    for token in ("", "wrong-token"):
        with pytest.raises(HttpError) as e:
            client(server, token).get("/models")
        assert e.value.status == 401
        assert e.value.body["error"]["type"] == "authentication_error"
    req = urllib.request.Request(f"{server.url}/chat/completions", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(req)
    assert raw.value.code == 401 and raw.value.headers["WWW-Authenticate"] == "Bearer"
    assert client(server).get("/models")["data"][0]["id"] == "slime"


def test_configured_token_and_loopback_only(engine_and_config):
    engine, _ = engine_and_config
    srv = AgentApiServer([engine], engine.tokenizer, token="s3cret").start()
    try:
        assert srv.token == "s3cret" and srv.url.startswith("http://127.0.0.1:")
        assert client(srv).get("/models")["object"] == "list"
    finally:
        srv.stop()
    with pytest.raises(ValueError, match=r"agent_api.host = '0.0.0.0' is not a loopback.*allow_remote"):
        AgentApiServer([engine], engine.tokenizer, host="0.0.0.0")


def recompute_log_probs(cfg: Any, tokens: list[int], start: int) -> list[float]:
    """Log-probs of ``tokens[start:]`` under the engine's weights (temperature 1)."""
    import torch
    from slime_core.models.loading import load_causal_lm

    model = load_causal_lm(cfg.model, "cpu", torch.float32, seed=cfg.run.seed)
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1)
    target = torch.tensor(tokens[1:])
    return lp[torch.arange(len(tokens) - 1), target][start - 1:].tolist()


def test_session_is_recorded_and_finishes_into_a_sample(server, engine_and_config):
    engine, cfg = engine_and_config
    tok = engine.tokenizer
    c = client(server)
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2="}]
    r1 = chat_call(c, first, session="ep-1")
    assert r1["session_id"] == "ep-1" and r1["object"] == "chat.completion"
    reply1 = r1["choices"][0]["message"]
    # the agent echoes the reply in its own shape and adds a user turn
    second = first + [{"role": "assistant", "content": reply1["content"]},
                      {"role": "user", "content": "again"}]
    r2 = chat_call(c, second, session="ep-1")
    done = c.post("/sessions/ep-1/finish", {"reward": 1.0, "label": "4", "rollout_id": 7})
    samples = [Sample.from_dict(d) for d in done["samples"]]
    assert len(samples) == 1
    s = samples[0]
    s.validate()
    prompt = chat.encode(tok, chat.render_chat(tok, first))
    n1, n2 = r1["usage"]["completion_tokens"], r2["usage"]["completion_tokens"]
    assert s.tokens[:len(prompt)] == prompt and s.prompt_length == len(prompt)
    assert r2["usage"]["prompt_tokens"] == len(s.tokens) - n2
    delta_text = chat.continuation_text(
        tok, first + [{"role": "assistant", "content": "x"}], [{"role": "user", "content": "again"}],
        last_token_id=s.tokens[len(prompt) + n1 - 1])
    delta = chat.encode(tok, delta_text)
    assert s.tokens[len(prompt) + n1:len(prompt) + n1 + len(delta)] == delta
    assert s.loss_mask == [1] * n1 + [0] * len(delta) + [1] * n2
    # the model's log-probs were recorded for exactly its own tokens
    expected = recompute_log_probs(cfg, s.tokens, s.prompt_length)
    for got, want, m in zip(s.rollout_log_probs, expected, s.loss_mask):
        assert got == pytest.approx(want, abs=1e-4) if m else got == 0.0
    assert s.reward == 1.0 and s.label == "4" and s.rollout_id == 7
    assert s.session_id == "ep-1" and s.status in (Status.COMPLETED, Status.TRUNCATED)
    assert s.weight_versions == [engine.weight_version()]
    assert s.response.startswith(reply1["content"])
    with pytest.raises(HttpError) as e:  # finished sessions are gone
        c.post("/sessions/ep-1/finish", {})
    assert e.value.status == 404


def test_rewritten_history_starts_a_new_segment(server):
    c = client(server)
    r1 = chat_call(c, [{"role": "user", "content": "hi"}], user="agent-7")
    sid = r1["session_id"]
    assert sid == "agent-7"  # the OpenAI `user` field names the session
    # a different first message: not a continuation, so a second segment
    chat_call(c, [{"role": "user", "content": "something else"}], user="agent-7")
    summary = c.get(f"/sessions/{sid}")
    assert [g["completions"] for g in summary["segments"]] == [1, 1]
    samples = c.post(f"/sessions/{sid}/finish", {"rollout_id": 3})["samples"]
    assert [s["metadata"]["segment"] for s in samples] == [0, 1]
    assert {s["rollout_id"] for s in samples} == {3}
    assert {s["session_id"] for s in samples} == {"agent-7"}
    assert all(set(s["loss_mask"]) == {1} for s in samples)


def test_tool_calls_come_back_in_openai_shape(scripted, tokenizer):
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    engine = scripted([chat.encode(tokenizer, call), chat.encode(tokenizer, "42") + [1]],
                      tokenizer=tokenizer)
    srv = AgentApiServer([engine], tokenizer, tool_parser=HermesParser(), max_tokens=200).start()
    try:
        c = client(srv)
        tools = [{"type": "function", "function": {"name": "calculator", "parameters": {}}}]
        msgs = [{"role": "user", "content": "6*7?"}]
        r1 = chat_call(c, msgs, session="t", tools=tools, max_tokens=200)
        choice = r1["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        (tc,) = choice["message"]["tool_calls"]
        assert tc["function"]["name"] == "calculator"
        assert json.loads(tc["function"]["arguments"]) == {"expression": "6*7"}
        assert "</tool_call>" in engine.params[0].stop
        msgs += [choice["message"], {"role": "tool", "tool_call_id": tc["id"], "content": "42"}]
        r2 = chat_call(c, msgs, session="t", tools=tools, max_tokens=200)
        assert r2["choices"][0]["message"]["content"] == "42"
        (s,) = c.post("/sessions/t/finish", {})["samples"]
        hist = [msgs[0], {"role": "assistant", "content": "x"}]
        delta = chat.encode(tokenizer, chat.continuation_text(tokenizer, hist, [msgs[2]], tools))
        model1 = chat.encode(tokenizer, call)
        assert engine.prompts[1] == engine.prompts[0] + model1 + delta
        assert s["tokens"] == engine.prompts[1] + chat.encode(tokenizer, "42") + [1]
        assert s["loss_mask"] == [1] * len(model1) + [0] * len(delta) + [1] * 3
    finally:
        srv.stop()


@pytest.mark.parametrize(("body", "status", "needle"), [
    (b"{not json", 400, "not valid JSON"),
    ({"messages": []}, 400, "messages: [] should be non-empty"),
    ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role: 'robot' is not one of"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 99}, 400, "above the limit 12"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n = 1"),
])
def test_bad_requests_get_clear_errors(server, body, status, needle):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"{server.url}/chat/completions", data=data, method="POST",
                                 headers={"Authorization": f"Bearer {server.token}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == status
    assert needle in json.loads(e.value.read())["error"]["message"]
