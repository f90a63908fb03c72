"""The data source on real reasoning-gym generators and the tiny model's tokenizer."""

from __future__ import annotations

import json

import pytest
from rlve.source import AdaptiveSource


def score(groups, right: bool) -> None:
    for g in groups:
        for s in g:
            s.reward = 1.0 if right else 0.0


def test_prompts_follow_the_level_and_are_scored_by_the_task(make_config):
    from slime_std.rewards.reasoning_gym_reward import reasoning_gym_reward

    src = AdaptiveSource(make_config(), "train")
    (g,) = src.get_samples(1)
    s = g[0]
    a, b = s.prompt[:-1].split("+")
    assert s.prompt.endswith("=") and len(a) <= 2 and len(b) <= 2  # level 0: 0..10
    assert s.tokens == list(src.tokenizer.encode(s.prompt, add_special_tokens=False))
    assert s.metadata["rlve"] == {"level": 0} and len(g) == 2
    s.response = str(int(a) + int(b))
    assert reasoning_gym_reward(s) == 1.0  # the core's reward reads the entry we stamped
    s.response = str(int(a) + int(b) + 1)
    assert reasoning_gym_reward(s) == 0.0


def test_accuracy_moves_the_generator_up_and_down(make_config):
    src = AdaptiveSource(make_config(), "train")
    groups = src.get_samples(2)  # 4 samples = window
    score(groups, right=True)
    src.observe(groups)
    assert src.level == 1
    assert groups[0][0].metadata["rlve"]["level_after"] == 1
    (g,) = src.get_samples(1)
    a, b = g[0].prompt[:-1].split("+")
    assert g[0].metadata["rlve"]["level"] == 1 and max(len(a), len(b)) >= 2
    assert g[0].metadata["reasoning_gym"]["metadata"]["difficulty"]["num_digits"] == [2, 2]
    stale = src.get_samples(1)
    more = src.get_samples(2)
    score(more, right=False)
    for s in stale[0]:  # level-1 results only; pretend stale ones came from level 0
        s.metadata["rlve"]["level"] = 0
        s.reward = 1.0
    src.observe(stale + more)
    assert src.level == 0 and src.controller.max_level == 1


def test_state_dict_resumes_level_position_and_buffer(make_config):
    cfg = make_config()
    src = AdaptiveSource(cfg, "train")
    groups = src.get_samples(2)
    score(groups, right=True)
    src.observe(groups)
    src.get_samples(1)
    src.add_samples([src.get_samples(1)[0]])
    state = json.loads(json.dumps(src.state_dict()))  # what the checkpoint holds
    assert state["controller"]["level"] == 1
    nxt = [s.prompt for s in src.get_samples(2)[1]]
    other = AdaptiveSource(cfg, "train")
    other.load_state_dict(state)
    again = other.get_samples(2)
    assert other.level == 1 and [s.prompt for s in again[1]] == nxt
    assert again[0][0].index == state["buffer"][0][0]["index"]
    with pytest.raises(ValueError, match="another task or level ladder"):
        AdaptiveSource(make_config(levels=[{"min_digits": 1, "max_digits": 1}]),
                       "train").load_state_dict(state)


def test_eval_split_holds_every_level_each_time(make_config):
    src = AdaptiveSource(make_config(eval_levels=[0, 2]), "eval")
    first = src.get_samples(-1)
    assert [g[0].metadata["rlve"]["level"] for g in first] == [0, 0, 0, 2, 2, 2]
    assert [g[0].prompt for g in src.get_samples(-1)] == [g[0].prompt for g in first]


def test_configuration_errors_name_the_key(make_config):
    with pytest.raises(ValueError, match="rlve.levels is empty"):
        AdaptiveSource(make_config(levels=[]), "train")
    with pytest.raises(ValueError, match=r"rlve.levels\[1\]"):
        AdaptiveSource(make_config(levels=[{}, {"no_such_option": 1}]), "train")
    with pytest.raises(ValueError, match="not a reasoning-gym dataset"):
        AdaptiveSource(make_config(task="no_such_task"), "train")
    with pytest.raises(ValueError, match="prompt_format"):
        AdaptiveSource(make_config(prompt_format="{nope}"), "train").get_samples(1)


def test_chat_template_kwargs_reach_the_template(make_config, tmp_path):
    """data.chat_template_kwargs (slime's --apply-chat-template-kwargs) go to the template."""
    import dataclasses

    from slime_core.config.model import Config
    from slime_core.testing import THINKING_CHAT_TEMPLATE, write_char_tokenizer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(
        str(write_char_tokenizer(tmp_path, chat_template=THINKING_CHAT_TEMPLATE)))
    base = make_config()
    data = dataclasses.replace(base.data, apply_chat_template=True,
                               chat_template_kwargs={"enable_thinking": False})
    config = Config({**{n: base.section(n) for n in base.sections()}, "data": data}, base.source)
    src = AdaptiveSource(config, "train")
    src.set_tokenizer(tok)
    (g,) = src.get_samples(1)
    assert tok.decode(g[0].tokens).endswith("\n<assistant><think></think>")
