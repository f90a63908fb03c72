"""Multi-turn generation with tools: loss masks, verbatim ids, budgets, every error kind.

The engine is scripted (a tiny random model cannot be made to emit a given tool call); the
engine client, tokenizer, parser, tools and the bubblewrap sandbox are the real ones.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from slime_agent import chat
from slime_agent.metrics import tool_metrics
from slime_agent.multiturn import generate_with_tools
from slime_agent.runtime import AgentRuntime
from slime_core.rollout.engine_client import EngineClient
from slime_hookspecs import Sample, SamplingParams, Status, ToolRecord, hookimpl

PROMPT = "Q: 123*45="
EOS = 1
PAD = 0


def ids(tokenizer: Any, text: str) -> list[int]:
    return chat.encode(tokenizer, text)


def call_text(name: str, args: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def run_episode(config: Any, manager: Any, tokenizer: Any, engine: Any, prompt: Any = PROMPT,
                max_new_tokens: int = 400) -> Sample:
    rt = AgentRuntime(config, manager, tokenizer)
    if isinstance(prompt, list):
        prompt_ids = ids(tokenizer, chat.render_chat(tokenizer, prompt))
    else:
        prompt_ids = ids(tokenizer, prompt)
    sample = Sample(prompt=prompt, tokens=list(prompt_ids), label="5535")
    params = SamplingParams(max_new_tokens=max_new_tokens, stop=["</answer>"])
    out = asyncio.run(generate_with_tools(config, sample, params, EngineClient(engine), rt))
    out.validate()
    return out


def test_model_ids_verbatim_observations_masked(agent_config, manager, tokenizer, scripted):
    cfg = agent_config(tools={"enabled": ["calculator"]})
    # A pad id inside the model's output: the engine's text drops it (special tokens are
    # skipped), so re-encoding that text loses it; the ids survive only if never re-tokenized.
    turn1 = ids(tokenizer, "let me check ") + [PAD] + ids(
        tokenizer, call_text("calculator", {"expression": "123*45"}))
    turn2 = ids(tokenizer, "<answer>5535</answer>") + [EOS]
    assert ids(tokenizer, tokenizer.decode(turn1, skip_special_tokens=True)) != turn1
    engine = scripted([turn1, turn2], tokenizer=tokenizer)
    s = run_episode(cfg, manager, tokenizer, engine)

    obs = ids(tokenizer, "\n<tool_response>\n5535\n</tool_response>\n")
    prompt = ids(tokenizer, PROMPT)
    assert s.status == Status.COMPLETED
    assert s.tokens == prompt + turn1 + obs + turn2
    assert engine.prompts == [prompt, prompt + turn1 + obs]
    assert s.loss_mask == [1] * len(turn1) + [0] * len(obs) + [1] * len(turn2)
    lp1 = [-0.1 * (k + 1) for k in range(len(turn1))]
    lp2 = [-0.1 * (k + 1) for k in range(len(turn2))]
    assert s.rollout_log_probs == pytest.approx(lp1 + [0.0] * len(obs) + lp2)
    assert s.weight_versions == [3]
    # per-turn stop strings and the remaining budget
    assert "</tool_call>" in engine.params[0].stop and "</answer>" in engine.params[0].stop
    assert engine.params[0].max_new_tokens == 400
    assert engine.params[1].max_new_tokens == 400 - len(turn1) - len(obs)
    assert s.metadata["turns"] == 2 and s.metadata["tool_calls"] == 1
    assert s.metadata["tool_errors"] == {}
    assert "<tool_response>\n5535\n</tool_response>" in s.response
    assert tool_metrics([s], "rollout")["rollout/tool_success_rate"] == 1.0


def test_chat_prompt_observation_from_the_chat_template(agent_config, manager, tokenizer, scripted):
    cfg = agent_config(tools={"enabled": ["calculator"]})
    messages = [{"role": "user", "content": "123*45?"}]
    turn1 = ids(tokenizer, call_text("calculator", {"expression": "123*45"}))
    turn2 = ids(tokenizer, "5535") + [EOS]
    engine = scripted([turn1, turn2], tokenizer=tokenizer)
    s = run_episode(cfg, manager, tokenizer, engine, prompt=messages)
    # the test template writes "<role>content\n" per message and "<assistant>" to generate
    obs = ids(tokenizer, "\n<tool>5535\n<assistant>")
    start = s.prompt_length
    assert s.tokens[start:] == turn1 + obs + turn2
    assert s.loss_mask == [1] * len(turn1) + [0] * len(obs) + [1] * len(turn2)


def test_chat_template_kwargs_reach_every_turn(agent_config, manager, scripted, tmp_path):
    """data.chat_template_kwargs (slime's --apply-chat-template-kwargs): the text after a tool
    result ends in the generation prompt the template writes with those keywords, in an
    episode and in the agent API's sessions alike."""
    from slime_agent.sessions import SessionStore
    from slime_core.testing import THINKING_CHAT_TEMPLATE, write_char_tokenizer
    from transformers import AutoTokenizer

    tok_dir = write_char_tokenizer(tmp_path, chat_template=THINKING_CHAT_TEMPLATE)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    cfg = agent_config(tools={"enabled": ["calculator"]}, model={"tokenizer": str(tok_dir)},
                       data={"chat_template_kwargs": {"enable_thinking": False}})
    messages = [{"role": "user", "content": "123*45?"}]
    turn1 = ids(tok, call_text("calculator", {"expression": "123*45"}))
    turn2 = ids(tok, "5535") + [EOS]
    s = run_episode(cfg, manager, tok, scripted([turn1, turn2], tokenizer=tok), prompt=messages)
    obs = ids(tok, "\n<tool>5535\n<assistant><think></think>")
    assert s.tokens[s.prompt_length:] == turn1 + obs + turn2
    # without the keyword the template leaves thinking on: no empty think block
    plain = run_episode(agent_config(tools={"enabled": ["calculator"]},
                                     model={"tokenizer": str(tok_dir)}),
                        manager, tok, scripted([turn1, turn2], tokenizer=tok), prompt=messages)
    assert plain.tokens[plain.prompt_length:] == turn1 + ids(tok, "\n<tool>5535\n<assistant>") + turn2
    # the agent API's sessions render the first request and every continuation alike
    store = SessionStore(tok, 1, template_kwargs={"enable_thinking": False})
    plan = store.plan(store.get_or_create("s"), messages, None)
    assert tok.decode(plan.prompt_ids) == "<user>123*45?\n<assistant><think></think>"


def test_turn_end_already_generated_is_not_doubled(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}<eos>"
                         "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]
    new = [{"role": "tool", "content": "R"}]
    assert chat.continuation_text(tok, history, new) == "<eos><tool>R<eos><assistant>"
    assert chat.continuation_text(tok, history, new, last_token_id=EOS) == "<tool>R<eos><assistant>"
    # an ordinary last token leaves the text alone
    assert chat.continuation_text(tok, history, new, last_token_id=ids(tok, "x")[0]).startswith("<eos>")


class SlowTools:
    """A test plugin: ``slime_register_tools`` adds a slow coroutine tool and a context probe."""

    @hookimpl
    def slime_register_tools(self):
        async def sleepy(seconds: float) -> str:
            await asyncio.sleep(seconds)
            return "woke up"

        async def whoami(tool_context) -> str:
            return f"sample {tool_context.sample.label}"

        return [
            ToolRecord(name="sleepy", factory=lambda config: sleepy,
                       parameters={"type": "object", "properties": {"seconds": {"type": "number"}},
                                   "required": ["seconds"]}),
            ToolRecord(name="whoami", factory=lambda config: whoami),
        ]


@pytest.fixture
def slow_manager():
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    m = SlimePluginManager(PluginSelection(plugins=["core_tools", "core_sandbox"])).load()
    m.register_object(SlowTools(), "slow_tools")
    return m


def test_every_bad_call_kind_is_an_observation_and_counted(agent_config, slow_manager, tokenizer,
                                                           scripted):
    cfg = agent_config(tools={"enabled": ["calculator", "python", "sleepy", "whoami"],
                              "timeout": 2.0, "max_calls_per_turn": 8, "max_turns": 3})
    calls = [
        "<tool_call>{not json}</tool_call>",  # malformed
        call_text("search", {"q": "x"}),  # unknown_tool
        call_text("calculator", {"expr": "1+1"}),  # invalid_arguments
        call_text("calculator", {"expression": "1/0"}),  # tool_error (the tool raised)
        call_text("sleepy", {"seconds": 30}),  # timeout (executor)
        call_text("python", {"code": "import time\ntime.sleep(60)"}),  # timeout (sandbox)
        call_text("python", {"code": "raise SystemExit(3)"}),  # tool_error (exit code)
        call_text("whoami", {}),  # ok, with the episode context
        call_text("calculator", {"expression": "2+2"}),  # too_many_calls (9th item > 8)
    ]
    turn1 = ids(tokenizer, "".join(calls))
    turn2 = ids(tokenizer, "done") + [EOS]
    engine = scripted([turn1, turn2], tokenizer=tokenizer)
    s = run_episode(cfg, slow_manager, tokenizer, engine, max_new_tokens=4000)
    assert s.status == Status.COMPLETED
    m = s.metadata
    assert m["tool_calls"] == 9
    assert m["tool_errors"] == {"malformed": 1, "unknown_tool": 1, "invalid_arguments": 1,
                                "tool_error": 2, "timeout": 2, "too_many_calls": 1}
    assert [t["kind"] for t in m["tool_trace"]] == [
        "malformed", "unknown_tool", "invalid_arguments", "tool_error", "timeout", "timeout",
        "tool_error", "", "too_many_calls"]
    obs_text = s.response
    for needle in ("not valid JSON", "unknown tool 'search'; available tools: calculator, "
                   "python, sleepy, whoami", "'expression' is a required property",
                   "division by zero", "did not finish within 2 s", "was killed",
                   "exit code 3", "sample 5535", "at most 8 tool calls"):
        assert needle in obs_text, needle
    metrics = tool_metrics([s], "rollout")
    assert metrics["rollout/tool_calls"] == 9
    assert metrics["rollout/tool_errors/timeout"] == 2
    assert metrics["rollout/tool_success_rate"] == pytest.approx(1 / 9)
    # the whole observation is masked, the model turns are not
    n1, n2 = len(turn1), len(turn2)
    assert s.loss_mask[:n1] == [1] * n1 and s.loss_mask[-n2:] == [1] * n2
    assert set(s.loss_mask[n1:-n2]) == {0}


def test_python_tool_runs_in_the_sandbox_and_output_is_cut(agent_config, manager, tokenizer,
                                                          scripted):
    cfg = agent_config(tools={"enabled": ["python"], "max_observation_tokens": 20})
    code = "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), 2)\n    print('net')\n" \
           "except OSError:\n    print('no network')\nprint('x' * 500)"
    turn1 = ids(tokenizer, call_text("python", {"code": code}))
    engine = scripted([turn1, ids(tokenizer, "ok") + [EOS]], tokenizer=tokenizer)
    s = run_episode(cfg, manager, tokenizer, engine, max_new_tokens=2000)
    assert s.metadata["tool_errors"] == {}
    assert "no network\nxxxxxxxxx" in s.response
    assert "[truncated:" in s.response and s.metadata["observations_truncated"] == 1


def test_budget_and_turn_limits(agent_config, manager, tokenizer, scripted):
    cfg = agent_config(tools={"enabled": ["calculator"], "max_turns": 2})
    call = ids(tokenizer, call_text("calculator", {"expression": "1+1"}))
    # turn limit: the second turn calls again, but no third turn is allowed
    s = run_episode(cfg, manager, tokenizer, scripted([call, call]))
    assert s.status == Status.COMPLETED and s.metadata["max_turns_reached"]
    assert s.metadata["tool_calls"] == 1 and s.metadata["turns"] == 2
    # the observation would fill the budget: truncated, nothing appended after the turn
    s = run_episode(cfg, manager, tokenizer, scripted([call]), max_new_tokens=len(call) + 5)
    assert s.status == Status.TRUNCATED and s.metadata["observation_over_budget"]
    assert s.response_length == len(call)
    # the model's turn itself hits the budget
    s = run_episode(cfg, manager, tokenizer, scripted([call]), max_new_tokens=10)
    assert s.status == Status.TRUNCATED and s.response_length == 10
    assert s.metadata["tool_calls"] == 0


def test_no_tool_call_is_a_single_turn(agent_config, manager, tokenizer, scripted):
    cfg = agent_config(tools={"enabled": ["calculator"]})
    s = run_episode(cfg, manager, tokenizer, scripted([ids(tokenizer, "5535") + [EOS]]))
    assert s.status == Status.COMPLETED and s.metadata["turns"] == 1
    assert s.loss_mask == [1] * s.response_length
    assert tool_metrics([s], "rollout") == {
        "rollout/tool_calls": 0.0, "rollout/tool_calls_per_sample": 0.0, "rollout/turns_mean": 1.0}


def test_wrong_names_fail_naming_the_choices(agent_config, manager, tokenizer):
    with pytest.raises(KeyError, match=r"tools.enabled: unknown tool 'calculater'.*calculator"):
        AgentRuntime(agent_config(tools={"enabled": ["calculater"]}), manager, tokenizer)
    with pytest.raises(KeyError, match=r"tools.parser: unknown tool parser 'qwen'.*hermes"):
        AgentRuntime(agent_config(tools={"enabled": ["calculator"], "parser": "qwen"}),
                     manager, tokenizer)
    with pytest.raises(KeyError, match=r"tools.sandbox: unknown sandbox 'docker'.*local"):
        AgentRuntime(agent_config(tools={"enabled": ["python"], "sandbox": "docker"}),
                     manager, tokenizer)
    with pytest.raises(Exception, match=r"tools.observation_template"):
        agent_config(tools={"observation_template": "{obs}"})


def test_counts_restart_with_a_fresh_episode(agent_config, manager, tokenizer, scripted):
    cfg = agent_config(tools={"enabled": ["calculator"]})
    rt = AgentRuntime(cfg, manager, tokenizer)
    stale = {"turns": 3, "tool_calls": 5, "tool_errors": {"timeout": 2}, "tool_trace": [{}],
             "max_turns_reached": True, "keep": "me"}
    sample = Sample(prompt=PROMPT, tokens=ids(tokenizer, PROMPT), metadata=dict(stale))
    engine = scripted([ids(tokenizer, "1") + [EOS]], tokenizer=tokenizer)
    out = asyncio.run(generate_with_tools(cfg, sample, SamplingParams(max_new_tokens=20),
                                          EngineClient(engine), rt))
    assert out.metadata == {"turns": 1, "tool_calls": 0, "tool_errors": {}, "tool_trace": [],
                            "keep": "me"}
