"""``gpqa``: the multiple-choice letter of the response against the right one, 1.0 or 0.0.

The right letter comes, first match wins, from ``metadata["correct_letter"]``; a label that is
one valid letter (``"C"``); an integer label (index into the letters: 2 is ``C``); a label equal
(case and punctuation aside) to one of ``metadata["choices"]`` (a list, or a dict whose
values are the choices in order). Valid letters: ``metadata["valid_letters"]``, else as many
as there are choices, else A..J.

The response's letter is read after the last ``</think>``, first match wins:
``\\boxed{C}``; the *last* "answer/option/choice (is|:) X" (models restate and correct
themselves: "the answer is A... no, the answer is C" chose C); "X is (the) correct"; else the
last standalone valid capital letter. The letter must stand alone in upper case: "the answer
is a rhombus" and "Answer: Because..." choose nothing (slime's case-insensitive pattern reads
``A`` and ``B`` from them). ``(C)``, ``[C]``, ``C)``, ``C.`` and ``**C**`` are read as ``C``.

With a letter on both sides the reward is whether they are equal. Without one, slime's
fallback: 1.0 when the normalised text of the right choice (or of
``metadata["correct_answer"]`` / ``["answer_text"]``, or of a label that is not a letter)
appears in the normalised response, else 0.0.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample

DEFAULT_LETTERS = tuple(string.ascii_uppercase[:10])
_LETTER = r"(?<![A-Za-z0-9])[\(\[\*]*([A-Z])[\)\]\*]*(?![A-Za-z0-9'])"
_BOXED = re.compile(r"\\boxed\{\s*(?:\\text\{)?\s*([A-Z])\s*\}?\s*\}")
_STATED = re.compile(r"(?i:answer|option|choice)\s*(?i:is)?\s*:?\s*" + _LETTER)
_CORRECT = re.compile(_LETTER + r"\s*(?i:is\s*(?:the\s*)?correct)")
_ALONE = re.compile(_LETTER)
_PRONOUN = re.compile(r"I(?:\s+[a-z]|$)")  # "I think", not a choice


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _after_thinking(text: str) -> str:
    return text.rsplit("</think>", 1)[-1] if "</think>" in text else text


def _choices(metadata: dict[str, Any]) -> list[str] | None:
    choices = metadata.get("choices")
    if isinstance(choices, dict):
        return [str(c) for c in choices.values()]
    return [str(c) for c in choices] if choices else None


def valid_letters(metadata: dict[str, Any]) -> list[str]:
    if metadata.get("valid_letters"):
        return [str(x).strip().upper() for x in metadata["valid_letters"]]
    choices = _choices(metadata)
    return list(string.ascii_uppercase[:len(choices)]) if choices else list(DEFAULT_LETTERS)


def correct_letter(label: Any, metadata: dict[str, Any], letters: list[str]) -> str | None:
    """The right letter (see the module docstring), or ``None`` when the data names none."""
    given = metadata.get("correct_letter")
    if isinstance(given, str) and given.strip():
        return given.strip().upper()
    if isinstance(label, bool):
        return None
    if isinstance(label, (int, float)):
        i = int(label)
        return letters[i] if 0 <= i < len(letters) else None
    if isinstance(label, str):
        text = label.strip()
        if len(text) == 1 and text.upper() in letters:
            return text.upper()
        for i, choice in enumerate(_choices(metadata) or []):
            if _norm(choice) == _norm(text) and i < len(letters):
                return letters[i]
    return None


def response_letter(response: str, letters: list[str]) -> str | None:
    """The chosen letter (see the module docstring), or ``None``."""
    text = _after_thinking(response or "")
    valid = set(letters)
    for pattern, last in ((_BOXED, True), (_STATED, True), (_CORRECT, False)):
        found = [m.group(1) for m in pattern.finditer(text) if m.group(1) in valid]
        if found:
            return found[-1] if last else found[0]
    alone = [m.group(1) for m in _ALONE.finditer(text) if m.group(1) in valid
             and not (m.group(1) == "I" and _PRONOUN.match(text, m.start(1)))]
    return alone[-1] if alone else None


def gpqa_score(response: str | None, label: Any, metadata: dict[str, Any] | None) -> float:
    if response is None:
        return 0.0
    md = metadata or {}
    letters = valid_letters(md)
    right = correct_letter(label, md, letters)
    chosen = response_letter(response, letters)
    if right and chosen:
        return 1.0 if chosen == right else 0.0
    targets = []
    choices = _choices(md)
    if right and choices and right in letters and letters.index(right) < len(choices):
        targets.append(choices[letters.index(right)])
    targets += [str(md[k]) for k in ("correct_answer", "answer_text") if md.get(k)]
    if isinstance(label, str) and label.strip() and right is None:
        targets.append(label)
    said = _norm(_after_thinking(response))
    return 1.0 if any(_norm(t) and _norm(t) in said for t in targets) else 0.0


def gpqa_reward(sample: Sample) -> float:
    return gpqa_score(sample.response, sample.label, sample.metadata)


def make_gpqa_reward(config: Any) -> Callable[[Sample], float]:
    return gpqa_reward
