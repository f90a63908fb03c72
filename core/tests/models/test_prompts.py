"""``check_generate_inputs``: the one set of input checks every engine's ``generate`` makes."""

from __future__ import annotations

import pytest
from slime_core.api import check_generate_inputs
from slime_hookspecs import SamplingParams

SP = SamplingParams(max_new_tokens=4)


def test_good_prompts_come_back_as_int_lists() -> None:
    assert check_generate_inputs([(1, 2), [3]], [SP, SP], vocab_size=10, context_length=8) == [
        [1, 2], [3]]


@pytest.mark.parametrize(("prompts", "kwargs", "words"), [
    ([[1], [2]], {}, "2 prompts but 1 sampling params"),
    ([[]], {}, "prompt 0 is empty"),
    ([[1, 2, 3]], {"context_length": 3}, "prompt 0 has 3 tokens, the model's context is 3"),
    ([[1, 12]], {"vocab_size": 10}, "prompt 0 has token id 12, outside the model's vocabulary"),
    ([[1, -1]], {"vocab_size": 10}, "token id -1"),
])
def test_bad_inputs_are_named(prompts, kwargs, words) -> None:
    params = [SP] if len(prompts) != 1 or words.startswith("2") else [SP] * len(prompts)
    with pytest.raises(ValueError, match=words):
        check_generate_inputs(prompts, params, **kwargs)


def test_stop_strings_need_a_tokenizer_and_unknown_limits_are_not_checked() -> None:
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        check_generate_inputs([[1]], [SP.replace(stop=["\n"])], has_tokenizer=False)
    # no vocabulary or context given (a server judges those itself): nothing checked
    assert check_generate_inputs([[10**9] * 5000], [SP]) == [[10**9] * 5000]
