"""Tool-source records: listed tools join the executor under their names, with their schemas;
per-episode state and close callbacks of the ToolContext."""

from __future__ import annotations

import asyncio

import pytest
from slime_agent.executor import ToolExecutor
from slime_agent.parsers import ToolCall
from slime_agent.tools import ToolContext, tool_records
from slime_hookspecs import ToolRecord


class Source:
    def __init__(self, config):
        self.closed: list[str] = []

    async def list_tools(self):
        return [{"name": "echo", "description": "say it back",
                 "parameters": {"type": "object", "properties": {"x": {"type": "integer"}},
                                "required": ["x"]}}]

    async def call(self, name, arguments, tool_context):
        n = tool_context.state.setdefault("calls", 0) + 1
        tool_context.state["calls"] = n
        if n == 1:
            async def close():
                self.closed.append(f"closed after {tool_context.state['calls']}")
            tool_context.on_close(close)
        return f"{name}:{arguments['x']}:{n}"


def test_listed_tools_are_validated_called_and_closed_per_episode():
    holder = {}

    def factory(config):
        holder["source"] = Source(config)
        return holder["source"]

    rec = ToolRecord(name="src", factory=factory, owner="p", extra={"tool_source": True})
    calc = {r.name: r for r in tool_records()}["calculator"]
    ex = ToolExecutor(None, {"src": rec, "calculator": calc}, timeout=5.0)
    assert sorted(ex.tools) == ["calculator", "echo"]
    assert {s["function"]["name"] for s in ex.schemas()} == {"calculator", "echo"}

    async def episode():
        ctx = ToolContext(None)
        outs = [await ex.run(ToolCall(name="echo", arguments=a), ctx) for a in ({"x": 1}, {"x": 2}, {"x": "no"})]
        await ctx.close()
        return outs

    outs = asyncio.run(episode())
    assert [o.text for o in outs[:2]] == ["echo:1:1", "echo:2:2"]
    assert outs[2].kind == "invalid_arguments"
    assert holder["source"].closed == ["closed after 2"]


def test_a_listed_name_that_clashes_fails_naming_the_source():
    class Clash(Source):
        async def list_tools(self):
            return [{"name": "calculator", "parameters": {"type": "object"}}]

    rec = ToolRecord(name="src", factory=Clash, owner="p", extra={"tool_source": True})
    calc = {r.name: r for r in tool_records()}["calculator"]
    with pytest.raises(ValueError, match="'calculator' of source 'src' clashes"):
        ToolExecutor(None, {"calculator": calc, "src": rec}, timeout=5.0)


class SlowSetUpSource:
    """Set-up (``prepare``) slower than ``tools.timeout``, a fast call; or the slow part in
    the call itself (``slow_call``), which the limit must still stop."""

    def __init__(self, config, slow_call=False, broken=False):
        self.slow_call, self.broken = slow_call, broken
        self.prepared: list[str] = []

    def list_tools(self):
        return [{"name": "ping", "description": "", "parameters": {"type": "object"}}]

    async def prepare(self, name, tool_context):
        if self.broken:
            raise ConnectionError("server refused the session")
        if "session" not in tool_context.state:
            await asyncio.sleep(0.3)
            tool_context.state["session"] = "open"
        self.prepared.append(name)

    async def call(self, name, arguments, tool_context):
        if self.slow_call:
            await asyncio.sleep(0.3)
        return f"pong ({tool_context.state.get('session')})"


@pytest.mark.parametrize("kind", ["slow_prepare", "slow_call", "broken"])
def test_prepare_runs_before_the_call_and_outside_its_time_limit(kind, monkeypatch):
    from slime_agent import executor as executor_mod

    monkeypatch.setattr(executor_mod, "CONTEXT_GRACE_S", 0.0)
    holder = {}

    def factory(config):
        holder["s"] = SlowSetUpSource(config, slow_call=kind == "slow_call",
                                      broken=kind == "broken")
        return holder["s"]

    rec = ToolRecord(name="src", factory=factory, owner="t", extra={"tool_source": True})
    ex = ToolExecutor(None, {"src": rec}, timeout=0.1)

    async def run():
        ctx = ToolContext(None)
        try:
            return [await ex.run(ToolCall(name="ping", arguments={}, id=str(i), position=0), ctx)
                    for i in range(2)]
        finally:
            await ctx.close()

    out = asyncio.run(run())
    if kind == "slow_prepare":  # 0.3 s of set-up against a 0.1 s limit: not the call's time
        assert [o.ok for o in out] == [True, True] and out[0].text == "pong (open)"
        assert holder["s"].prepared == ["ping", "ping"]
    elif kind == "slow_call":  # the call's own time is still limited
        assert [o.kind for o in out] == ["timeout", "timeout"]
    else:
        assert [o.kind for o in out] == ["tool_error", "tool_error"]
        assert "could not be prepared: ConnectionError: server refused" in out[0].text
