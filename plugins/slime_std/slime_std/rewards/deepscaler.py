"""``deepscaler`` / ``boxed_deepscaler``: DeepScaleR's rule-based reward, 1.0 or 0.0.

As slime's ``deepscaler`` reward: the solution is the text after the last ``</think>`` (else
after the first ``###Response``); a response with neither scores 0.0, so does one whose
solution has no ``\\boxed{}``. The boxed answer is graded against the label (its own
``\\boxed{}`` content when it has one) by :func:`slime_std.rewards.math_grade.grade`:
MATH string normalisation, else sympy equivalence (``\\frac{1}{2}`` = ``0.5``, but ``2/4`` is not
``1/2`` and ``\\sqrt{4}`` is not ``2``). An empty label scores 0.0.

``boxed_deepscaler`` drops the ``</think>`` requirement: the last ``\\boxed{}`` of the whole
response is graded (for models that do not think in tags).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample

from slime_std.rewards.boxed import last_boxed
from slime_std.rewards.math_grade import grade


def _truth(label: Any) -> str | None:
    if label is None or str(label).strip() == "":
        return None
    text = str(label)
    return last_boxed(text) if "\\boxed" in text else text


def solution_part(response: str) -> str | None:
    """The answer part of a thinking model's response, or ``None`` (no ``</think>``)."""
    if "</think>" in response:
        return response.rsplit("</think>", 1)[-1]
    if "###Response" in response:
        return response.split("###Response")[1]
    return None


def deepscaler_reward(sample: Sample) -> float:
    solution = solution_part(sample.response or "")
    if solution is None:
        return 0.0
    return 1.0 if grade(last_boxed(solution), _truth(sample.label)) else 0.0


def boxed_deepscaler_reward(sample: Sample) -> float:
    return 1.0 if grade(last_boxed(sample.response or ""), _truth(sample.label)) else 0.0


def make_deepscaler_reward(config: Any) -> Callable[[Sample], float]:
    return deepscaler_reward


def make_boxed_deepscaler_reward(config: Any) -> Callable[[Sample], float]:
    return boxed_deepscaler_reward
