"""The decorator and the entry-point loader (no model, no server)."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest
from slime_agent import EntryPoint, load_entrypoint, rollout_entrypoint
from slime_agent.episode import merge, sampling_args
from slime_hookspecs import Sample, SamplingParams, Status

HERE = Path(__file__).resolve().parent


def test_arguments_are_chosen_by_name_and_unknown_ones_fail_at_decoration():
    @rollout_entrypoint
    async def agent(client, label, sampling, retries=3):  # retries: the agent's own option
        return (client, label, sampling, retries)

    ep = agent.__slime_entrypoint__
    assert isinstance(ep, EntryPoint) and ep.wants == ("client", "label", "sampling")
    got = asyncio.run(ep(client="C", label="7", sampling={}, prompt="unused", sample=None))
    assert got == ("C", "7", {}, 3)
    with pytest.raises(TypeError, match="unknown parameter 'question'.*client, base_url"):
        rollout_entrypoint(lambda question: 0.0)
    with pytest.raises(TypeError, match=r"\*\*kw"):
        rollout_entrypoint(lambda **kw: 0.0)


def test_a_plain_def_runs_off_the_event_loop_thread():
    @rollout_entrypoint
    def agent(base_url, api_key):
        return (base_url, api_key, threading.current_thread() is threading.main_thread())

    async def call():
        return await agent.__slime_entrypoint__(base_url="http://x/v1", api_key="k")

    assert asyncio.run(call()) == ("http://x/v1", "k", False)


def test_entrypoints_load_by_module_or_file_and_must_be_decorated(tmp_path, monkeypatch):
    ep = load_entrypoint(f"{HERE / 'two_turn_agent.py'}:rollout")
    assert ep.wants == ("client", "model", "prompt", "sampling")
    (tmp_path / "plain_mod.py").write_text(
        "from slime_agent import rollout_entrypoint\n"
        "@rollout_entrypoint\nasync def go(sample):\n    return 1.0\n"
        "async def undecorated(sample):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_entrypoint("plain_mod:go").wants == ("sample",)
    with pytest.raises(TypeError, match="not decorated"):
        load_entrypoint("plain_mod:undecorated")
    with pytest.raises(AttributeError, match="has no 'missing'"):
        load_entrypoint("plain_mod:missing")
    with pytest.raises(ValueError, match="expected 'package.module:function'"):
        load_entrypoint("plain_mod")
    with pytest.raises(FileNotFoundError):
        load_entrypoint(f"{tmp_path / 'nope.py'}:go")
    sys.modules.pop("plain_mod", None)


def test_sampling_arguments_follow_the_rollout_within_the_apis_limit():
    p = SamplingParams(temperature=0.7, top_p=0.9, top_k=5, max_new_tokens=64, stop=["\n"])
    assert sampling_args(p, 16) == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 16,
                                    "stop": ["\n"], "extra_body": {"top_k": 5}}
    assert "extra_body" not in sampling_args(SamplingParams(top_k=-1), 8)


def test_merge_keeps_the_dataset_sample_and_takes_the_recorded_tokens():
    orig = Sample(index=3, group_index=1, prompt="1+2=", tokens=[5, 6], label="3",
                  metadata={"k": 1})
    rec = Sample(tokens=[5, 6, 7, 2, 8, 9], response_length=4, loss_mask=[1, 1, 0, 1],
                 rollout_log_probs=[-0.1, -0.2, 0.0, -0.3], status=Status.TRUNCATED,
                 response="x", session_id="s", metadata={"completions": 2, "messages": []})
    out = merge(orig, [rec], 0.5, "m:f")
    assert (out.index, out.group_index, out.prompt, out.label) == (3, 1, "1+2=", "3")
    assert out.tokens == rec.tokens and out.loss_mask == rec.loss_mask
    assert out.status == Status.TRUNCATED and out.session_id == "s"
    assert out.metadata["agent_reward"] == 0.5 and out.metadata["k"] == 1
    assert orig.tokens == [5, 6]  # the original is not edited
    two = merge(orig, [rec, rec], None, "m:f")
    assert len(two) == 2 and "agent_reward" not in two[0].metadata
    assert [s.metadata["agent"]["segment"] for s in two] == [0, 1]


def test_run_start_fails_early_on_a_wrong_name_or_a_tools_clash(tmp_path):
    from types import SimpleNamespace

    from slime_agent import plugin

    (tmp_path / "not_an_agent.py").write_text("async def rollout(sample):\n    return 1.0\n")

    from slime_core.testing import write_char_tokenizer

    chat_tok = str(write_char_tokenizer(tmp_path / "tok"))  # has a chat template

    def cfg(entry, tools=(), tokenizer=chat_tok):
        return SimpleNamespace(agent=SimpleNamespace(entrypoint=entry, timeout_s=0.0),
                               tools=SimpleNamespace(enabled=list(tools)),
                               model=SimpleNamespace(tokenizer=tokenizer, path="",
                                                     trust_remote_code=False))

    plugin.slime_run_start(cfg(""), str(tmp_path))  # off: nothing to check
    assert plugin.slime_generate(cfg(""), Sample(), SamplingParams(), None) is None
    with pytest.raises(TypeError, match="not decorated"):
        plugin.slime_run_start(cfg(f"{tmp_path / 'not_an_agent.py'}:rollout"), str(tmp_path))
    good = f"{HERE / 'two_turn_agent.py'}:rollout"
    with pytest.raises(ValueError, match="tools.enabled"):
        plugin.slime_run_start(cfg(good, ["python"]), str(tmp_path))
    plugin.slime_run_start(cfg(good), str(tmp_path))
    # the agent API renders chat messages: a tokenizer without a template fails here, not
    # at the first episode (issue 38)
    no_template = str(HERE.parents[2] / "examples" / "tiny_arith" / "model")
    with pytest.raises(ValueError, match=r"model\.tokenizer .*has no chat template"):
        plugin.slime_run_start(cfg(good, tokenizer=no_template), str(tmp_path))
    # the plugin no longer answers the deprecated slime_reward hook: its reward is a record
    assert not hasattr(plugin, "slime_reward")


def test_agent_reward_record_prefers_the_agents_reward(monkeypatch):
    """``agent_episode``: the function's returned reward, else the reward the user chose (per
    sample or per group)."""
    from types import SimpleNamespace

    from slime_agent import reward as agent_reward

    users = {"rollout.reward": SimpleNamespace(factory=lambda config: lambda s: 0.9)}
    monkeypatch.setattr(agent_reward, "_users", lambda config, key: users[key])
    fn = agent_reward.agent_episode(None)
    assert fn(Sample(metadata={"agent_reward": 0.3})) == 0.3
    assert fn(Sample()) == 0.9
    users["rollout.reward"] = SimpleNamespace(
        factory=lambda config: lambda samples: [0.1 * (i + 1) for i in range(len(samples))])
    group = agent_reward.agent_episode_group(None)
    out = asyncio.run(group([Sample(), Sample(metadata={"agent_reward": 0.5}), Sample()]))
    assert out == [0.1, 0.5, 0.2]
