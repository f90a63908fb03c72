"""``\\boxed{...}`` answers: the last box of a text, with nested braces.

Models write ``\\boxed{\\frac{1}{2}}``, ``\\boxed 5`` and ``\\fbox{...}``; a regex stops at the
first ``}`` and reads ``\\frac{1`` from the first, so the braces are counted.
"""

from __future__ import annotations

import re

_OPEN = re.compile(r"\\(?:boxed|fbox)\b")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed x`` in ``text``.

    ``None`` when there is none or its braces never close (a response cut by the token
    budget in the middle of its box has no answer).
    """
    starts = [m.end() for m in _OPEN.finditer(text or "")]
    if not starts:
        return None
    i = starts[-1]
    if i < len(text) and text[i] == " ":  # "\boxed 5": the argument is one word
        word = text[i + 1:].split(None, 1)
        return word[0].rstrip(".,;$") if word else None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return None
