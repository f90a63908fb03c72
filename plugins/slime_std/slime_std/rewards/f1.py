"""``f1``: SQuAD-style token F1 between the response and the label, 0.0 .. 1.0.

As slime's ``f1`` reward: both texts are lower-cased, stripped of punctuation and of the
articles a/an/the, and split on whitespace; the reward is the harmonic mean of token
precision and recall (counts matter: ``"paris paris"`` against ``"paris"`` has precision
0.5). A yes/no question is all or nothing: when either side normalises to exactly ``yes``,
``no`` or ``noanswer`` the two must be equal (``"no"`` against ``"no way"`` is 0.0, not 0.67).
No shared token, an empty response or no label: 0.0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ALL_OR_NOTHING = ("yes", "no", "noanswer")


def normalize(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def f1_score(prediction: str | None, truth: str | None) -> float:
    """Token F1 of ``prediction`` against ``truth`` (see the module docstring)."""
    if prediction is None or truth is None:
        return 0.0
    pred, gold = normalize(prediction), normalize(truth)
    if (pred in _ALL_OR_NOTHING or gold in _ALL_OR_NOTHING) and pred != gold:
        return 0.0
    common = Counter(pred.split()) & Counter(gold.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred.split()), same / len(gold.split())
    return 2 * precision * recall / (precision + recall)


def f1_reward(sample: Sample) -> float:
    return f1_score(sample.response, None if sample.label is None else str(sample.label))


def make_f1_reward(config: Any) -> Callable[[Sample], float]:
    return f1_reward
