"""``dapo`` / ``boxed_dapo``: DAPO's Minerva-style check; 1.0 when right, -1.0 otherwise.

As slime's ``dapo`` reward (DAPO's ``math_dapo`` scorer): only the last 300 characters of the
response are read (the longest MATH-500 answer has 159); the answer is the text after the
*last* ``Answer:`` (any case) up to the end of its line; both it and the label go through the
Minerva normalisation (:func:`normalize_final_answer`: the part after the last ``=``, no
units or ``\\text{}``, the content of ``$...$`` and ``\\boxed{}``, ``\\fracab`` to
``\\frac{a}{b}``, ``1,000`` to ``1000``) and are compared as strings. DAPO's answers are
integers: the label is read as one (``"12.0"`` is 12). A label that is not an integer fails
the sample, naming it (slime truncates ``2.5`` to 2 without a word; that would score a wrong
model answer as right).

Wrong, missing (no ``Answer:``) and unparsable answers all score -1.0, never 0.

``boxed_dapo`` reads the last ``\\boxed{}`` of the response instead (DAPO's strict-box mode):
no box is -1.0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample

from slime_std.rewards.boxed import last_boxed

TAIL_CHARS = 300
_ANSWER = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
_SUBSTITUTIONS = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""),
                  ("mbox", "text"), (",\\text{and}", ","), ("\\text{and}", ","),
                  ("\\text{m}", "\\text{}"))
_REMOVED = ("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units",
            "\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm",
            "gm", "pounds", "meters", "meals", "edges", "students", "childrentickets",
            "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
            "\\text{\n}", "\\text{}", r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;", r",\!",
            "{,}", '"', "\\dots", "<|im_end|>", "<|endoftext|>")


def normalize_final_answer(answer: str) -> str:
    """The Minerva normalisation of a final answer (see the module docstring)."""
    s = str(answer).split("=")[-1]
    for before, after in _SUBSTITUTIONS:
        s = s.replace(before, after)
    for expr in _REMOVED:
        s = s.replace(expr, "")
    s = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", r"$\3$", s)
    for command in ("text", "textbf", "overline"):
        s = re.sub(rf"(\\{command}\{{)(.*?)(\}})", r"\2", s)
    s = re.sub(r"(\\boxed\{)(.*)(\})", r"\2", s)
    s = re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}", s)
    s = re.sub(r"(sqrt)([^{])", r"sqrt{\2}", s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def integer_label(label: Any) -> str:
    """The label as DAPO's integer string; ``ValueError`` naming it when it is not one."""
    text = normalize_final_answer(str(label))
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or value != int(value):
        raise ValueError(f"dapo reward: label {label!r} is not an integer (DAPO's answers are)")
    return str(int(value))


def dapo_answer(response: str) -> str | None:
    """The text after the last ``Answer:`` in the response's last 300 characters."""
    found = _ANSWER.findall((response or "")[-TAIL_CHARS:])
    return found[-1] if found else None


def dapo_reward(sample: Sample) -> float:
    """1.0 when the ``Answer:`` line equals the integer label, else -1.0."""
    truth = integer_label(sample.label)
    answer = dapo_answer(sample.response or "")
    return 1.0 if answer is not None and normalize_final_answer(answer) == truth else -1.0


def boxed_dapo_reward(sample: Sample) -> float:
    """1.0 when the last ``\\boxed{}`` equals the integer label, else -1.0."""
    truth = integer_label(sample.label)
    answer = last_boxed(sample.response or "")
    return 1.0 if answer is not None and normalize_final_answer(answer) == truth else -1.0


def make_dapo_reward(config: Any) -> Callable[[Sample], float]:
    return dapo_reward


def make_boxed_dapo_reward(config: Any) -> Callable[[Sample], float]:
    return boxed_dapo_reward
