"""Issue 38, items 1 and 5: the agent API refuses what made it a 500 or poisoned a reward.

A real aiohttp server on 127.0.0.1 in front of a real local engine. Found from outside: a lone
surrogate (``"\\ud800abc"``) in a message was a 500 (the tokenizer cannot encode it); a
tokenizer without a chat template (tiny_arith's) let the API start and answer every chat
with a 500; a session finished with ``"reward": 1e308`` was accepted.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from slime_agent.api import AgentApiServer
from slime_agent.http import HttpError, JsonClient

REPO = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def engine_and_config(tiny_local_engine):
    return tiny_local_engine({"max_new_tokens": 4, "max_abs_reward": 100.0})


@pytest.fixture
def server(engine_and_config):
    from slime_core.context import set_manager

    engine, cfg, m = engine_and_config
    set_manager(m)
    srv = AgentApiServer.from_config(cfg, [engine], engine.tokenizer).start()
    yield srv
    srv.stop()


def refused(c: JsonClient, path: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    with pytest.raises(HttpError) as e:
        c.post(path, body, **kw)
    assert e.value.status == 400, e.value.body
    return e.value.body["error"]


def test_a_lone_surrogate_is_a_400_naming_the_content(server):
    c = JsonClient(server.url, server.token)
    raw = b'{"messages": [{"role": "user", "content": "\\ud800abc"}], "max_tokens": 2}'
    req = urllib.request.Request(f"{server.url}/chat/completions", data=raw, method="POST",
                                 headers={"Authorization": f"Bearer {server.token}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    err = json.loads(e.value.read())["error"]
    assert e.value.code == 400 and err["param"] == "messages[0].content", err
    assert "not valid Unicode" in err["message"]
    # a text part, and a valid pair of surrogate escapes (one character) still work
    err = refused(c, "/chat/completions", {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]})
    assert err["param"] == "messages[0].content[0].text"
    ok = c.post("/chat/completions", {"messages": [{"role": "user", "content": "\U0001f600"}],
                                      "max_tokens": 2})
    assert ok["choices"][0]["message"]["role"] == "assistant"


@pytest.mark.parametrize(("reward", "param"), [
    (1e308, "reward"), (-101.0, "reward"), ({"acc": 1.0, "len": 1e308}, "reward.len")])
def test_finishing_a_session_with_a_reward_beyond_the_bound_is_a_400(server, reward, param):
    c = JsonClient(server.url, server.token)
    c.post("/chat/completions", {"messages": [{"role": "user", "content": "2+2="}],
                                 "max_tokens": 2}, headers={"X-Session-Id": "ep-1"})
    err = refused(c, "/sessions/ep-1/finish", {"reward": reward})
    assert err["param"] == param and "rollout.max_abs_reward = 100" in err["message"], err
    # the session is still there: a good reward finishes it
    out = c.post("/sessions/ep-1/finish", {"reward": 100.0})
    assert out["samples"][0]["reward"] == 100.0


def test_a_tokenizer_without_a_chat_template_is_refused_at_start_up(engine_and_config):
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema

    engine, _, m = engine_and_config
    tiny = REPO / "examples" / "tiny_arith" / "model"
    cfg = load_config(build_schema(m), data={"model": {"path": str(tiny)}})
    with pytest.raises(ValueError, match=r"model\.tokenizer .*has no chat template"):
        AgentApiServer.from_config(cfg, [engine])


def test_serving_alone_refuses_it_before_the_model_loads(tmp_path):
    import os
    import subprocess
    import sys

    tiny = REPO / "examples" / "tiny_arith" / "model"
    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'[model]\npath = "{tiny}"\n[agent_api]\nport = 0\n')
    env = {**os.environ, "SLIME_DISABLE_PLUGIN_AUTOLOAD": "1", "SLIME_AGENT_API_TOKEN": "tk"}
    proc = subprocess.Popen([sys.executable, "-m", "slime_agent.serve", "--config", str(cfg)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 2, out + err
    assert "model.tokenizer" in err and "has no chat template" in err
    assert "agent API on" not in out
