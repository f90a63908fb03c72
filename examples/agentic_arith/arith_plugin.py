"""The example's reward, as a plugin module (``run.plugin_modules = ["arith_plugin"]``; run
with ``PYTHONPATH=examples/agentic_arith`` so it can be imported).

``arith_answer``: 1.0 when the model's final turn (the text after the last tool response)
holds ``<answer>N</answer>`` with N equal to the label; 0.0 otherwise. Only the model's own
text counts: a number that appears in a tool response earns nothing.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from slime_hookspecs import RewardFunctionRecord, Sample, hookimpl

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def arith_answer(sample: Sample) -> float:
    final_turn = (sample.response or "").rsplit("</tool_response>", 1)[-1]
    found = _ANSWER.findall(final_turn)
    return 1.0 if found and found[-1].strip() == str(sample.label).strip() else 0.0


def make_arith_answer(config: Any) -> Callable[[Sample], float]:
    return arith_answer


@hookimpl
def slime_register_reward_functions() -> list[RewardFunctionRecord]:
    return [RewardFunctionRecord(
        name="arith_answer", factory=make_arith_answer,
        summary="1.0 when the final turn's <answer> equals the label (tool output does not count)",
    )]
