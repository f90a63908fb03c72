"""``run_episode`` against a real agent API on the tiny model (no trainer): the base-URL and
synchronous-client flavours, and the failures (timeout, an agent that never calls)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest
from slime_agent import rollout_entrypoint
from slime_agent.episode import run_episode
from slime_hookspecs import Sample, SamplingParams, Status

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def api():
    from slime_agent.api import AgentApiServer
    from slime_core.config import load_config
    from slime_core.context import set_manager
    from slime_std.engine.local_engine import LocalEngine
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.config.schema import build_schema

    manager = SlimePluginManager(PluginSelection(plugins=["slime_agent"])).load()
    set_manager(manager)
    config = load_config(build_schema(manager), data={
        "model": {"path": str(REPO / "examples/tiny_arith/model"),
                  "tokenizer": str(REPO / "examples/openai_agent/tokenizer")},
        "rollout": {"max_new_tokens": 6}})
    srv = AgentApiServer.from_config(config, [LocalEngine(config)]).start()
    yield config, srv
    srv.stop()


def sessions(srv) -> int:
    with urllib.request.urlopen(srv.url.removesuffix("/v1") + "/health", timeout=30) as r:
        return json.loads(r.read())["sessions"]


def episode(api, monkeypatch, fn, **kw):
    import slime_agent.buffer.services

    config, srv = api
    monkeypatch.setattr(slime_agent.buffer.services, "run_agent_api", lambda cfg: srv)
    sample = Sample(index=0, group_index=5, prompt="12+30=", label="42", tokens=[1, 2])
    return asyncio.run(run_episode(config, sample, SamplingParams(max_new_tokens=6),
                                   fn.__slime_entrypoint__, **kw))


def test_a_synchronous_agent_configured_by_base_url_is_recorded(api, monkeypatch):
    @rollout_entrypoint
    def agent(base_url, api_key, model, prompt, sampling):
        import openai  # the blocking client, as an agent framework would hold it

        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        r = client.chat.completions.create(model=model, messages=[
            {"role": "user", "content": prompt}], **sampling)
        return {"score": 0.25, "len": float(len(r.choices[0].message.content or ""))}

    s = episode(api, monkeypatch, agent)
    assert s.status in (Status.COMPLETED, Status.TRUNCATED) and s.group_index == 5
    assert s.prompt_tokens == [53, 54, 47, 55, 52, 65]  # "12+30=" rendered by the template
    assert s.loss_mask == [1] * s.response_length and s.response_length >= 1
    assert s.metadata["agent_reward"]["score"] == 0.25
    assert s.session_id.startswith("agent-5-0-") and sessions(api[1]) == 0


def test_timeouts_and_agents_that_never_call_fail_and_leave_no_session(api, monkeypatch):
    @rollout_entrypoint
    async def slow(client, prompt):
        await client.chat.completions.create(model="slime", messages=[
            {"role": "user", "content": prompt}], max_tokens=2)
        await asyncio.sleep(30)

    with pytest.raises(TimeoutError):
        episode(api, monkeypatch, slow, timeout_s=3.0)
    assert sessions(api[1]) == 0  # the half-recorded session was dropped

    @rollout_entrypoint
    async def silent(label):
        return 1.0

    with pytest.raises(RuntimeError, match="made no chat completion"):
        episode(api, monkeypatch, silent)
