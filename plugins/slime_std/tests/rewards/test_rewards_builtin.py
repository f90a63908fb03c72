"""exact, math and reasoning_gym rewards, and their registration."""

from __future__ import annotations

import pickle

import pytest
from slime_hookspecs import Sample
from slime_std.rewards import (
    extract_answer,
    make_exact_reward,
    make_math_reward,
    make_reasoning_gym_reward,
)


def sample(response: str, label=None, **kw) -> Sample:
    return Sample(response=response, label=label, **kw)


def test_records_are_registered():
    from slime_core.pluginmgr import SlimePluginManager

    reg = SlimePluginManager().load().registries.reward_function
    assert {"exact", "math", "reasoning_gym", "remote"} <= set(reg.names())
    assert reg.get("exact").owner == "core_rewards"


def test_exact(make_config):
    fn = make_exact_reward(make_config(rollout={"stop": ["</s>", "\n\n"]}))
    assert fn(sample("  42 \n", "42")) == 1.0
    assert fn(sample("42</s>junk", " 42 ")) == 1.0
    assert fn(sample("42\n\nmore</s>", "42")) == 1.0
    assert fn(sample("42", 42)) == 1.0  # label compared as a string
    assert fn(sample("4 2", "42")) == 0.0
    assert fn(sample("42", None)) == 0.0
    assert pickle.loads(pickle.dumps(fn))(sample("7", "7")) == 1.0


def test_math(make_config):
    pytest.importorskip("math_verify")
    fn = make_math_reward(make_config())
    assert fn(sample("So the answer is \\boxed{1/2}.", "0.5")) == 1.0
    assert fn(sample("first 0.3, finally \\boxed{\\frac{1}{2}}", "0.5")) == 1.0
    assert fn(sample("\\boxed{0.5}", "\\frac{1}{2}")) == 1.0
    assert fn(sample("\\boxed{3}", "0.5")) == 0.0
    assert fn(sample("no idea \\boxed{", "0.5")) == 0.0  # unparsable: 0.0, no exception
    assert fn(sample("\\boxed{1}", "}}{{\\frac")) == 0.0
    assert fn(sample("", "1")) == 0.0 and fn(sample("\\boxed{1}", None)) == 0.0


def test_math_verdicts_are_memoized_per_label_and_response(make_config):
    """A repeated (label, response) pair is answered from the memo with the same verdict, a
    label's parse is shared by its different responses, and the memo never hides a change of
    response or label."""
    pytest.importorskip("math_verify")
    import importlib

    # (the package exports the function under the module's name)
    mod = importlib.import_module("slime_std.rewards.math_reward")
    fn = make_math_reward(make_config())
    mod._verdict.cache_clear()
    mod._gold.cache_clear()
    label = "7/13"  # not used by any other test: its parse is a miss first
    assert fn(sample("it is \\boxed{7/13}", label)) == 1.0
    assert fn(sample("it is \\boxed{7/13}", label)) == 1.0
    assert mod._verdict.cache_info().hits == 1
    assert fn(sample("\\boxed{14/26}", label)) == 1.0  # another response: verified, not looked up
    assert fn(sample("\\boxed{7/12}", label)) == 0.0
    gold = mod._gold.cache_info()
    assert (gold.misses, gold.hits) == (1, 2)  # one parse of the label for three responses
    assert fn(sample("it is \\boxed{7/13}", "7/12")) == 0.0  # same response, other label


def test_extract_answer():
    assert extract_answer("think <answer>1</answer> then <answer> 2 </answer>") == "2"
    assert extract_answer("  plain \n") == "plain"


def test_reasoning_gym_scorer_from_the_source(make_config, tiny_tokenizer_dir):
    pytest.importorskip("reasoning_gym")
    from slime_std.data import make_reasoning_gym_source

    config = make_config(
        model={"path": str(tiny_tokenizer_dir)},
        data={"source": "reasoning_gym", "task": "basic_arithmetic", "size": 3},
        rollout={"n_samples_per_prompt": 2, "reward": "reasoning_gym"},
    )
    (right, wrong), = make_reasoning_gym_source(config, "train").get_samples(1)
    fn = make_reasoning_gym_reward(config)
    right.response = f"Let me think. <answer>{right.label}</answer>"
    wrong.response = "<answer>no idea</answer>"  # the default scorer gives partial credit to a
    # response that merely contains the oracle, so the wrong answer holds no digits
    assert fn(right) == 1.0
    assert fn(wrong) == 0.0
    right.response = f"  {right.label} "  # no tags: the stripped response is the answer
    assert fn(right) == 1.0


def test_reasoning_gym_reward_from_file_metadata_and_missing_entry():
    pytest.importorskip("reasoning_gym")
    from slime_std.rewards import reasoning_gym_reward

    s = sample("<answer>7</answer>", "7", metadata={"source_dataset": "basic_arithmetic"})
    assert reasoning_gym_reward(s) == 1.0
    with pytest.raises(ValueError, match="metadata\\['reasoning_gym'\\].*keys: \\['x'\\]"):
        reasoning_gym_reward(sample("1", "1", metadata={"x": 1}))
