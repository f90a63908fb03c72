"""Small text helpers shared by the rewards."""

from __future__ import annotations

import re
from collections.abc import Iterable

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def cut_at_stop(text: str, stops: Iterable[str]) -> str:
    """``text`` up to the earliest occurrence of any stop string (unchanged without one)."""
    cut = len(text)
    for stop in stops:
        if stop:
            pos = text.find(stop)
            if 0 <= pos < cut:
                cut = pos
    return text[:cut]


def extract_answer(response: str) -> str:
    """The text of the last ``<answer>...</answer>`` block, stripped; else the stripped response.

    (reasoning-gym's own ``extract_answer`` also takes the last block.)
    """
    matches = _ANSWER_RE.findall(response or "")
    if matches:
        return matches[-1].strip()
    return (response or "").strip()
