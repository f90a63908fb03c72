"""Tool and tool-parser records, the calculator, the Hermes parser and the ``[tools]`` section."""

from __future__ import annotations

import pytest
from slime_agent.calculator import CalculatorError, evaluate, format_number
from slime_agent.parsers import HermesParser
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_hookspecs import ToolParserRecord, ToolRecord, hookimpl


def test_builtin_tools_via_slime_register_tools(manager):
    got = {r.name: r for rs in manager.pluggy.hook.slime_register_tools()
           for r in (rs if isinstance(rs, list) else [rs])}
    assert {"calculator", "python"} <= set(got)
    calc = manager.registries.tool.get("calculator")
    assert calc.owner == "core_tools"
    schema = calc.schema()
    assert schema["type"] == "function" and schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]
    assert manager.registries.tool.get("python").extra["needs_sandbox"] is True
    assert calc.factory(None)("(1234 + 56) * 7") == "9030"


def test_builtin_parser_via_slime_register_tool_parsers(manager):
    got = [r for rs in manager.pluggy.hook.slime_register_tool_parsers()
           for r in (rs if isinstance(rs, list) else [rs])]
    assert "hermes" in {r.name for r in got}
    parser = manager.registries.tool_parser.get("hermes").factory(None, None)
    assert parser.stop == ["</tool_call>"]
    content, calls, errors = parser('a <tool_call>{"name": "x", "arguments": {"k": 1}}</tool_call> b')
    assert content == "a  b" and [(c.name, c.arguments) for c in calls] == [("x", {"k": 1})]
    assert errors == []


class Extra:
    """A third-party plugin adding a tool and a parser through the registration hooks."""

    @hookimpl
    def slime_register_tools(self):
        return ToolRecord(name="echo", factory=lambda config: (lambda text: text),
                          parameters={"type": "object", "properties": {"text": {"type": "string"}}})

    @hookimpl
    def slime_register_tool_parsers(self):
        return ToolParserRecord(name="hermes_alt", factory=lambda config, tok: HermesParser(
            open_tag="<call>", close_tag="</call>"))


class Clash:
    @hookimpl
    def slime_register_tools(self):
        return [ToolRecord(name="calculator", factory=lambda config: None)]


def test_plugin_records_and_duplicates():
    m = SlimePluginManager(PluginSelection(plugins=["core_tools", "core_sandbox"])).load()
    m.register_object(Extra(), "extra_tools")
    assert m.registries.tool.get("echo").owner == "extra_tools"
    alt = m.registries.tool_parser.get("hermes_alt").factory(None, None)
    assert alt.stop == ["</call>"] and alt('<call>{"name": "echo"}</call>').calls[0].name == "echo"
    m2 = SlimePluginManager(PluginSelection(plugins=["core_tools", "core_sandbox"])).load()
    m2.register_object(Clash(), "clash")
    with pytest.raises(ValueError, match=r"tool 'calculator' is registered by both plugin "
                                         r"'core_tools' and plugin 'clash'"):
        m2.registries.tool.get("calculator")


def test_invalid_tool_schema_is_reported(agent_config, tokenizer):
    from slime_agent.runtime import AgentRuntime

    class BadSchema:
        @hookimpl
        def slime_register_tools(self):
            return ToolRecord(name="bad", factory=lambda config: (lambda: "x"),
                              parameters={"type": "objekt"})

    m = SlimePluginManager(PluginSelection(plugins=["core_tools", "core_sandbox"])).load()
    m.register_object(BadSchema(), "bad_schema")
    with pytest.raises(ValueError, match=r"tool 'bad' \(plugin bad_schema\): its parameters are "
                                         r"not a valid JSON schema"):
        AgentRuntime(agent_config(tools={"enabled": ["bad"]}), m, tokenizer)


@pytest.mark.parametrize(("text", "kind_or_args"), [
    ('<tool_call>{"name": "f", "arguments": "{\\"a\\": 2}"}</tool_call>', {"a": 2}),
    ('<tool_call>{"name": "f", "parameters": {"a": 3}}</tool_call>', {"a": 3}),
    ('<tool_call>\n{"name": "f"}\n</tool_call>', {}),
    ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name"'),
    ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', '"arguments" of \'f\' must be'),
    ('<tool_call>{"name": "f", "arguments": "{oops"}</tool_call>', "is a string but not JSON"),
    ('<tool_call>{"name": "f"', "never closed"),
])
def test_hermes_parser_cases(text, kind_or_args):
    res = HermesParser()(text)
    if isinstance(kind_or_args, dict):
        assert [c.arguments for c in res.calls] == [kind_or_args] and res.errors == []
    else:
        assert res.calls == [] and len(res.errors) == 1
        assert res.errors[0].kind == "malformed" and kind_or_args in res.errors[0].message


@pytest.mark.parametrize(("expr", "value"), [
    ("1234 * 5678", "7006652"), ("7 / 2", "3.5"), ("6 / 3", "2"), ("2 ** 10", "1024"),
    ("-(3 - 10) % 4", "3"), ("17 // 5", "3"), ("sqrt(144) + abs(-2)", "14"),
    ("round(2.567, 2)", "2.57"), ("max(1, 9, 3)", "9"), ("1e3 + 0.5", "1000.5"),
])
def test_calculator_values(expr, value):
    assert format_number(evaluate(expr)) == value


@pytest.mark.parametrize(("expr", "needle"), [
    ("__import__('os').system('id')", "not allowed"), ("open('/etc/passwd')", "'open' is not allowed"),
    ("(1).__class__", "Attribute is not allowed"), ("[1, 2]", "List is not allowed"),
    ("'a' * 3", "only numbers"), ("2 ^ 3", "write ** for powers"), ("9 ** 9 ** 9", "exponents"),
    ("10 ** 5000", "more than 4000 digits"), ("1 / 0", "division by zero"),
    ("x + 1", "unknown name 'x'"), ("1 +", "invalid expression"), ("", "empty"),
    ("1" * 600, "longer than 500"), ("lambda: 1", "Lambda is not allowed"),
    ("(-8) ** 0.5", "not a real number"), ("sqrt(-1)", "sqrt()"),
])
def test_calculator_refuses(expr, needle):
    with pytest.raises(CalculatorError) as e:
        evaluate(expr)
    assert needle in str(e.value)


def test_tools_section_keys(agent_config):
    cfg = agent_config(tools={"enabled": ["calculator"], "max_turns": 3, "timeout": 5})
    assert cfg.tools.max_turns == 3 and cfg.tools.parser == "hermes" and cfg.tools.sandbox == "local"
    with pytest.raises(Exception, match=r"unknown config key 'tools.max_turn'.*did you mean 'tools.max_turns'"):
        agent_config(tools={"max_turn": 3})
    with pytest.raises(Exception, match=r"tools.max_turns: must be >= 1"):
        agent_config(tools={"max_turns": 0})
    with pytest.raises(Exception, match=r"tools.enabled: lists a tool twice"):
        agent_config(tools={"enabled": ["python", "python"]})
    with pytest.raises(Exception, match=r"rollout_buffer.url: must be an http"):
        agent_config(rollout_buffer={"url": "localhost:1"})


def test_generate_answers_only_when_tools_are_enabled(agent_config):
    import inspect

    from slime_agent import tools_plugin

    off = agent_config()
    assert tools_plugin.slime_generate(config=off, sample=None, sampling_params=None,
                                       engine=None) is None
    on = agent_config(tools={"enabled": ["calculator"]})
    coro = tools_plugin.slime_generate(config=on, sample=None, sampling_params=None, engine=None)
    assert inspect.iscoroutine(coro)
    coro.close()
