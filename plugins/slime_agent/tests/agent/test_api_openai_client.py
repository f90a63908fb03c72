"""The agent API driven by the official ``openai`` client, and against hostile requests.

Issue 17, items 10 and 12. A real aiohttp server on 127.0.0.1 in front of a real local engine
(a tiny Qwen2), started the way docs/agentic.md says to start the API alone.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from slime_agent.api import AgentApiServer
from slime_agent.sessions import SessionError, SessionStore
from slime_core.testing import TINY_QWEN2, write_char_tokenizer

openai = pytest.importorskip("openai")

USER = [{"role": "user", "content": "2+2="}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """``(config, engine)``: the API's documented stand-alone start, minus ``.start()``."""
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_std.engine.local_engine import LocalEngine

    tok = write_char_tokenizer(tmp_path_factory.mktemp("oai_tok"))
    manager = SlimePluginManager(PluginSelection(plugins=["core_tools", "core_sandbox"])).load()
    set_manager(manager)
    config = load_config(build_schema(manager), data={
        "model": {"tokenizer": str(tok), "init_config": dict(TINY_QWEN2)},
        "rollout": {"max_new_tokens": 8},
        "agent_api": {"max_sessions": 3}})
    return config, LocalEngine(config)


@pytest.fixture
def api(stack):
    config, engine = stack
    srv = AgentApiServer.from_config(config, [engine]).start()
    yield srv
    srv.stop()


def oai(srv: AgentApiServer) -> Any:
    return openai.OpenAI(base_url=srv.url, api_key=srv.token, max_retries=0, timeout=60)


def raw(srv: AgentApiServer, method: str, path: str, data: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], Any]:
    req = urllib.request.Request(srv.url.removesuffix("/v1") + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {srv.token}",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


def assert_openai_error(body: dict[str, Any]) -> dict[str, Any]:
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, body
    return err


# -- item 12: what an OpenAI client sends ------------------------------------------------------

def test_logprobs_are_returned_and_match_the_recorded_sample(api):
    c = oai(api)
    r = c.chat.completions.create(model="slime", messages=USER, max_tokens=6, logprobs=True,
                                  extra_headers={"X-Session-Id": "lp"})
    lps = r.choices[0].logprobs.content
    assert len(lps) == r.usage.completion_tokens > 0
    assert all(e.logprob <= 0 and e.top_logprobs == [] for e in lps)
    assert "".join(e.token for e in lps).startswith(r.choices[0].message.content)
    (sample,) = c.post("/sessions/lp/finish", body={}, cast_to=object)["samples"]
    assert sample["rollout_log_probs"] == pytest.approx([e.logprob for e in lps])


def test_streaming_gives_the_same_answer_as_a_plain_call(api):
    c = oai(api)
    plain = c.chat.completions.create(model="slime", messages=USER, max_tokens=6, seed=11)
    stream = c.chat.completions.create(model="slime", messages=USER, max_tokens=6, seed=11,
                                       stream=True, stream_options={"include_usage": True},
                                       logprobs=True, user="streamed")
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == plain.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finish[-1] == plain.choices[0].finish_reason and all(f is None for f in finish[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    # the streamed call was recorded like any other
    summary = c.get("/sessions/streamed", cast_to=object)
    assert summary["segments"][0]["completions"] == 1


@pytest.mark.parametrize(("extra", "param"), [
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"top_logprobs": 3, "logprobs": True}, "top_logprobs"),
    ({"n": 2}, "n"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"extra_body": {"colour": "red"}}, "colour"),
    ({"seed": 2**80}, "seed"),
    ({"temperature": True}, "temperature"),
    ({"max_tokens": 2.5}, "max_tokens"),
    ({"extra_body": {"top_k": 0}}, "top_k"),
])
def test_unsupported_or_bad_parameters_are_refused_by_name(api, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        oai(api).chat.completions.create(model="slime", messages=USER, **{"max_tokens": 4, **extra})
    assert e.value.status_code == 400 and e.value.param == param, e.value.body
    assert param in e.value.body["message"]  # the openai client unwraps "error"
    assert e.value.type == "invalid_request_error"


def test_accepted_no_op_parameters(api):
    r = oai(api).chat.completions.create(
        model="slime", messages=[{"role": "developer", "content": "be brief"}, *USER],
        max_completion_tokens=4, response_format={"type": "text"}, frequency_penalty=0,
        presence_penalty=0, n=1, parallel_tool_calls=True, store=False, top_logprobs=0,
        tool_choice="auto", service_tier="auto", temperature=None)
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens <= 4


def test_unknown_endpoints_and_methods_answer_in_openai_shape(api):
    with pytest.raises(openai.NotFoundError) as e:
        oai(api).completions.create(model="slime", prompt="hi")
    assert e.value.body["message"] == "Invalid URL (POST /v1/completions)"
    status, body, _ = raw(api, "GET", "/v1/nope")
    assert status == 404 and assert_openai_error(body)["code"] == "unknown_url"
    status, body, headers = raw(api, "GET", "/v1/chat/completions")
    assert status == 405 and assert_openai_error(body)["code"] == "method_not_allowed"
    assert "POST" in headers["Allow"]
    status, body, _ = raw(api, "GET", "/v1/nope", headers={"Authorization": "Bearer wrong"})
    assert status == 401 and assert_openai_error(body)["type"] == "authentication_error"


def test_stateless_calls_leave_no_session(api):
    c = oai(api)
    for _ in range(5):
        r = c.chat.completions.with_raw_response.create(model="slime", messages=USER,
                                                        max_tokens=2)
        assert "x-session-id" not in r.headers and r.parse().session_id is None
    status, health, _ = raw(api, "GET", "/health")
    assert health["sessions"] == 0


def test_abandoned_sessions_do_not_lock_out_new_ones(api):
    c = oai(api)
    for i in range(6):  # max_sessions = 3: the oldest idle ones make room
        c.chat.completions.create(model="slime", messages=USER, max_tokens=2,
                                  extra_headers={"X-Session-Id": f"s{i}"})
    status, health, _ = raw(api, "GET", "/health")
    assert health["sessions"] == 3 and health["evicted_sessions"] == 3
    with pytest.raises(openai.NotFoundError) as e:
        c.post("/sessions/s0/finish", body={}, cast_to=object)
    assert "was evicted" in e.value.body["message"]
    assert len(c.post("/sessions/s5/finish", body={}, cast_to=object)["samples"]) == 1


def test_429_only_when_every_session_is_busy(tokenizer):
    async def main() -> None:
        store = SessionStore(tokenizer, 1, max_sessions=2)
        a, b = store.get_or_create("a"), store.get_or_create("b")
        async with a.lock, b.lock:
            with pytest.raises(SessionError) as e:
                store.get_or_create("c")
            assert e.value.status == 429
        store.get_or_create("c")  # idle again: "a" is evicted
        assert set(store.sessions) == {"b", "c"} and store.evicted == 1

    asyncio.run(main())


# -- item 10: hostile bodies get a 4xx naming the field -----------------------------------------

def test_deep_json_is_a_400(api):
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, body, _ = raw(api, "POST", "/v1/chat/completions", deep)
    assert status == 400 and "nested deeper than 64" in assert_openai_error(body)["message"]
    status, body, _ = raw(api, "POST", "/v1/chat/completions",
                          b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}')
    assert status == 400 and assert_openai_error(body)["param"] == "temperature"


def test_prompts_are_limited_by_the_models_context(api, stack):
    _, engine = stack
    c = oai(api)
    t0 = time.monotonic()
    with pytest.raises(openai.BadRequestError) as e:  # ~900 kB: under the 1 MiB body limit
        c.chat.completions.create(model="slime", max_tokens=4,
                                  messages=[{"role": "user", "content": "x" * 900_000}])
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
    assert f"maximum context length is {TINY_QWEN2['max_position_embeddings']}" in \
        e.value.body["message"]
    assert time.monotonic() - t0 < 30
    # a prompt that fits, with max_tokens left out, gets what still fits (3 of its 8)
    from slime_agent import chat

    overhead = len(chat.encode(engine.tokenizer, chat.render_chat(
        engine.tokenizer, [{"role": "user", "content": ""}])))
    long = [{"role": "user", "content": "y" * (253 - overhead)}]
    r = c.chat.completions.create(model="slime", messages=long, temperature=0)
    assert r.usage.prompt_tokens == 253 and r.usage.completion_tokens <= 3
    with pytest.raises(openai.BadRequestError) as e:  # asked for explicitly: refused
        c.chat.completions.create(model="slime", messages=long, max_tokens=8)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.APIStatusError) as e:  # beyond the body limit: 413, OpenAI shape
        c.chat.completions.create(model="slime", messages=[{"role": "user", "content": "z" * 2_000_000}])
    assert e.value.status_code == 413
    # the engine itself refuses prompts longer than its context
    with pytest.raises(ValueError, match="the model's context is 256"):
        from slime_hookspecs import SamplingParams

        engine.generate([[5] * 300], [SamplingParams(max_new_tokens=1)])


def test_empty_prompts_and_contents_are_4xx_not_500(stack, tmp_path):
    from slime_agent.sessions import content_text  # noqa: F401 - the path under test

    config, engine = stack
    from transformers import AutoTokenizer

    # a template that renders message contents only: empty content renders an empty prompt
    tok = AutoTokenizer.from_pretrained(str(write_char_tokenizer(
        tmp_path, chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}")))
    srv = AgentApiServer([engine], tok, max_tokens=4).start()
    try:
        for content in ("", [], None):
            status, body, _ = raw(srv, "POST", "/v1/chat/completions", json.dumps(
                {"messages": [{"role": "user", "content": content}]}).encode())
            assert status == 400 and assert_openai_error(body)["param"] == "messages", body
        for content in ([{"type": "image_url", "image_url": {"url": "x"}}], 7):
            status, body, _ = raw(srv, "POST", "/v1/chat/completions", json.dumps(
                {"messages": [{"role": "user", "content": content}]}).encode())
            assert status == 400 and assert_openai_error(body)["param"].startswith(
                "messages[0].content"), body
        status, body, _ = raw(srv, "POST", "/v1/chat/completions", b"")
        assert status == 400 and assert_openai_error(body)["code"] == "invalid_json"
    finally:
        srv.stop()


def test_finish_body_is_validated(api):
    c = oai(api)
    c.chat.completions.create(model="slime", messages=USER, max_tokens=2, user="f")
    for body, param in (({"reward": "high"}, "reward"), ({"rollout_id": 1.5}, "rollout_id"),
                        ({"metadata": [1]}, "metadata"), ({"colour": 1}, None)):
        with pytest.raises(openai.BadRequestError) as e:
            c.post("/sessions/f/finish", body=body, cast_to=object)
        assert e.value.param == param, e.value.body
    status, body, _ = raw(api, "POST", "/v1/sessions/f/finish", b'{"reward": Infinity}')
    assert status == 400 and assert_openai_error(body)["param"] == "reward"
    assert c.post("/sessions/f/finish", body={"reward": 1.0}, cast_to=object)["samples"]


def test_the_agent_api_starts_alone(tmp_path):
    """``python -m slime_agent.serve --config FILE`` as docs/agentic.md shows."""
    import os
    import subprocess
    import sys

    tok = write_char_tokenizer(tmp_path / "tok")
    init = ", ".join(f"{k} = {json.dumps(v)}" for k, v in TINY_QWEN2.items())
    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'[model]\ntokenizer = "{tok}"\ninit_config = {{ {init} }}\n'
                   "[rollout]\nmax_new_tokens = 8\n[agent_api]\nport = 0\n")
    env = {**os.environ, "SLIME_DISABLE_PLUGIN_AUTOLOAD": "1", "SLIME_AGENT_API_TOKEN": "tk"}
    proc = subprocess.Popen([sys.executable, "-m", "slime_agent.serve", "--config",
                             str(cfg)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        seen = []  # the lines before the address: the resolved `auto:` keys of the engine
        while not (line := proc.stdout.readline()).startswith("agent API on http://127.0.0.1:"):
            assert line and len(seen) < 50, "".join(seen) + line
            seen.append(line)
        url = line.split(" on ", 1)[1].strip()
        client = openai.OpenAI(base_url=url, api_key="tk", max_retries=0, timeout=60)
        r = client.chat.completions.create(model="slime", messages=USER, max_tokens=3,
                                           user="alone")
        assert r.session_id == "alone" and r.usage.completion_tokens <= 3
        (s,) = client.post("/sessions/alone/finish", body={"reward": 1.0},
                           cast_to=object)["samples"]
        assert s["reward"] == 1.0 and len(s["loss_mask"]) == r.usage.completion_tokens
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_a_session_base_url_records_into_its_session(api):
    # agents configured by base URL + key only (no headers, no `user`) still get recorded
    url = api.session_url("by/url 1")
    assert url.endswith("/sessions/by%2Furl%201/v1")
    c = openai.OpenAI(base_url=url, api_key=api.token, max_retries=0, timeout=60)
    assert [m.id for m in c.models.list().data] == ["slime"]
    first = c.chat.completions.create(model="slime", messages=USER, max_tokens=3)
    assert first.session_id == "by/url 1"
    follow = USER + [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "3+3="}]
    c.chat.completions.create(model="slime", messages=follow, max_tokens=3)
    (sample,) = api.finish_session("by/url 1", reward=1.0)
    assert sample.session_id == "by/url 1" and sample.metadata["completions"] == 2
    assert 0 in sample.loss_mask and sum(sample.loss_mask) >= 2  # the user turn is masked
