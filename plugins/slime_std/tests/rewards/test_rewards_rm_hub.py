"""Known answers of the rm_hub rewards (dapo, deepscaler, boxed_*, f1, gpqa, random),
including the formats that fool naive matchers."""

from __future__ import annotations

import pickle

import pytest
from slime_core.pluginmgr import SlimePluginManager
from slime_hookspecs import Sample
from slime_std.rewards.boxed import last_boxed
from slime_std.rewards.math_grade import grade


def fn(name: str, make_config, **rollout):
    rec = SlimePluginManager().load().registries.reward_function.get(name)
    return rec.factory(make_config(rollout=rollout))


def s(response: str, label=None, metadata=None, **kw) -> Sample:
    return Sample(response=response, label=label, metadata=metadata or {}, **kw)


def test_every_rm_hub_record_is_registered_and_pickles(make_config):
    names = {"dapo", "boxed_dapo", "deepscaler", "boxed_deepscaler", "boxed_math", "f1",
             "gpqa", "random"}
    reg = SlimePluginManager().load().registries.reward_function
    assert names <= set(reg.names())
    for name in names:
        assert pickle.loads(pickle.dumps(fn(name, make_config)))


def test_last_boxed_counts_braces():
    assert last_boxed(r"so \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"  # a regex stops at "\frac{1"
    assert last_boxed(r"\boxed{1} then \boxed{2}") == "2"
    assert last_boxed(r"\fbox{7}") == "7"
    assert last_boxed(r"\boxed 5.") == "5"
    assert last_boxed(r"cut off \boxed{\frac{1}{") is None  # unclosed: no answer
    assert last_boxed("no box 42") is None


# -- dapo ---------------------------------------------------------------------------------
def test_dapo_scores_one_or_minus_one(make_config):
    f = fn("dapo", make_config)
    assert f(s("work...\nAnswer: 42", "42")) == 1.0
    assert f(s("answer:   1,000\n", "1000")) == 1.0  # thousands separator, any case
    assert f(s("Answer: $x = 17$", "17")) == 1.0  # after the last "="
    assert f(s("Answer: \\boxed{12}", "12.0")) == 1.0  # the label is read as an integer
    assert f(s("Answer: 41", "42")) == -1.0  # wrong is -1, not 0
    assert f(s("The result is 42.", "42")) == -1.0  # no "Answer:" line: -1
    assert f(s("", "42")) == -1.0


def test_dapo_takes_the_last_answer_in_the_tail(make_config):
    f = fn("dapo", make_config)
    assert f(s("Answer: 42\nno wait\nAnswer: 43", "43")) == 1.0
    assert f(s("Answer: 42\nno wait\nAnswer: 43", "42")) == -1.0
    # only the last 300 characters count: an early answer followed by a long tail is lost
    assert f(s("Answer: 42\n" + "x" * 300, "42")) == -1.0


def test_dapo_refuses_a_non_integer_label(make_config):
    with pytest.raises(ValueError, match="not an integer"):
        fn("dapo", make_config)(s("Answer: 2", "2.5"))


def test_boxed_dapo(make_config):
    f = fn("boxed_dapo", make_config)
    assert f(s(r"Answer: 5 ... so \boxed{42}", "42")) == 1.0
    assert f(s("Answer: 42", "42")) == -1.0  # no box: -1
    assert f(s(r"\boxed{41}", "42")) == -1.0


# -- deepscaler -----------------------------------------------------------------------------
def test_deepscaler_needs_the_thinking_tag(make_config):
    f = fn("deepscaler", make_config)
    assert f(s(r"<think>2+2</think> The answer is \boxed{4}.", "4")) == 1.0
    assert f(s(r"The answer is \boxed{4}.", "4")) == 0.0  # no </think>: 0
    assert f(s(r"<think>\boxed{4}</think> so 4", "4")) == 0.0  # the box inside thinking
    assert f(s(r"prompt ###Response \boxed{4}", "4")) == 1.0
    assert f(s(r"</think>\boxed{4}", r"\boxed{4}")) == 1.0  # a boxed label is unboxed
    assert f(s(r"</think>\boxed{4}", "")) == 0.0


@pytest.mark.parametrize("given, truth, same", [
    (r"\frac{1}{2}", "0.5", True),
    (r"\dfrac{1}{2}", r"\frac12", True),
    ("1/2", r"\frac{1}{2}", True),
    ("2/4", "1/2", False),  # unreduced fraction: wrong
    (r"\sqrt{4}", "2", False),  # an integer answer must be written as an integer
    ("x = 5", "5", True),
    (r"5 \text{ cm}", "5", True),
    ("10^{\\circ}", "10", True),
    ("1,000", "1000", True),
    (r"2\sqrt{2}", r"\sqrt{8}", True),
    (r"\left( 1, 2 \right)", "(1,2)", True),
    ("[1,2]", "(1,2)", False),  # closed vs open interval
    ("(1,2,3)", "(1,2)", False),
    (r"\pi", "3.14", False),
    ("12", "21", False),
    ("", "1", False),
])
def test_math_grade(given, truth, same):
    assert grade(given, truth) is same


def test_boxed_deepscaler(make_config):
    f = fn("boxed_deepscaler", make_config)
    assert f(s(r"The answer is \boxed{\frac{3}{4}}", "0.75")) == 1.0
    assert f(s("The answer is 0.75", "0.75")) == 0.0  # no box: 0


# -- boxed_math (math-verify) -------------------------------------------------------------
def test_boxed_math_ignores_numbers_outside_the_box(make_config):
    f = fn("boxed_math", make_config)
    assert f(s(r"first 3, finally \boxed{\frac{1}{2}}", "0.5")) == 1.0
    assert f(s("the answer is 0.5", "0.5")) == 0.0  # math would say 1.0
    assert fn("math", make_config)(s("the answer is 0.5", "0.5")) == 1.0
    assert f(s(r"\boxed{3} no, \boxed{2}", "3")) == 0.0  # the last box counts


# -- f1 --------------------------------------------------------------------------------------
def test_f1_known_values(make_config):
    f = fn("f1", make_config)
    assert f(s("Paris", "paris")) == 1.0
    assert f(s("The Eiffel Tower!", "eiffel tower")) == 1.0  # articles and punctuation go
    assert f(s("The answer is Paris.", "Paris")) == pytest.approx(0.5)  # P 1/3, R 1
    assert f(s("paris paris", "paris")) == pytest.approx(2 / 3)  # counts matter: P 1/2
    assert f(s("no way", "no")) == 0.0  # yes/no is all or nothing (token F1 would be 2/3)
    assert f(s("yes", "no")) == 0.0
    assert f(s("london", "paris")) == 0.0
    assert f(s("paris", None)) == 0.0


# -- gpqa ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("response, label, score", [
    ("The answer is C", "C", 1.0),
    ("Answer: (B)", "B", 1.0),
    ("**Final answer: D**", "D", 1.0),
    (r"so \boxed{A}", "A", 1.0),
    ("I think A is wrong. The answer is C.", "C", 1.0),
    ("the answer is A... no, the answer is C", "C", 1.0),  # the last statement wins
    ("B is correct", "B", 1.0),
    ("<think>maybe the answer is A</think>The answer is D", "D", 1.0),
    ("<think>maybe the answer is A</think>The answer is D", "A", 0.0),
    ("The answer is C", "B", 0.0),
    ("C, I think", "C", 1.0),  # "I" the pronoun is not choice I
    ("the answer is a rhombus", "A", 0.0),  # lower-case "a" is an article, not a choice
    ("Answer: Because B.", "B", 1.0),  # "Because" is no letter; the standalone B is
    ("The answer is C", 2, 1.0),  # integer label: index into the letters
    ("", "C", 0.0),
])
def test_gpqa_letters(make_config, response, label, score):
    assert fn("gpqa", make_config)(s(response, label)) == score


def test_gpqa_choices_and_text_fallback(make_config):
    f = fn("gpqa", make_config)
    md = {"choices": ["red", "green", "blue", "yellow"]}
    assert f(s("The answer is B", "green", md)) == 1.0  # the label names a choice
    assert f(s("The answer is C", "green", md)) == 0.0
    assert f(s("it must be green", "green", md)) == 1.0  # no letter: the choice's text
    assert f(s("The answer is E", "green", md)) == 0.0  # E is no valid letter of 4 choices
    assert f(s("The answer is A", None, {"correct_letter": "a"})) == 1.0
    assert f(s("The answer is B", "A", {"valid_letters": ["A", "B"]})) == 0.0


# -- random ---------------------------------------------------------------------------------------
def test_random_is_a_seeded_fair_coin(make_config):
    f = fn("random", make_config)
    values = [f(s("x", index=i, group_index=i // 4)) for i in range(400)]
    assert set(values) == {0.0, 1.0}
    assert 150 < sum(values) < 250
    assert values == [f(s("x", index=i, group_index=i // 4)) for i in range(400)]  # repeatable
    reseeded = fn("random", lambda rollout: make_config(run={"seed": 7}))
    assert values != [reseeded(s("x", index=i, group_index=i // 4)) for i in range(400)]
