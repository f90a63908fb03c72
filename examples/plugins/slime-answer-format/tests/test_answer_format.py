from slime_hookspecs import Sample

from slime_answer_format.plugin import format_reward, slime_register_reward_functions


def test_format_reward() -> None:
    assert format_reward(Sample(response="so \\boxed{4}")) == 1.0
    assert format_reward(Sample(response="4")) == 0.0
    (rec,) = slime_register_reward_functions()
    assert rec.name == "answer_format"
