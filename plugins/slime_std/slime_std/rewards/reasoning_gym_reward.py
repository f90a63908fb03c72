"""``reasoning_gym``: score with the task's own scorer.

The answer is the last ``<answer>...</answer>`` block of the response, else the whole stripped
response. The entry is ``sample.metadata["reasoning_gym"]`` (written by the ``reasoning_gym``
data source: question, answer, metadata); for rows from a file that carry a reasoning-gym
entry's metadata (``metadata["source_dataset"]``) it is rebuilt as
``{"question": prompt, "answer": label, "metadata": sample.metadata}``.

The scorer is ``reasoning_gym.get_score_answer_fn(name)`` -- the ``score_answer`` method of a
default-configured instance of the dataset class registered under ``name`` -- where ``name``
is the entry's ``metadata["source_dataset"]`` (the sub-task for composite datasets), else
``sample.metadata["task"]``. Scorers are cached per name. A scorer that raises on the model's
text gives 0.0; a sample without an entry fails, naming what it has.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample

from slime_std.extras import require
from slime_std.rewards.text import extract_answer

log = logging.getLogger(__name__)


@functools.cache
def score_fn(name: str) -> Callable[[str | None, dict[str, Any]], float]:
    """The ``score_answer`` of reasoning-gym dataset ``name``."""
    require("reasoning_gym")
    import reasoning_gym

    try:
        return reasoning_gym.get_score_answer_fn(name)
    except ValueError as exc:
        raise ValueError(f"reasoning_gym reward: no scorer for dataset {name!r}: {exc}") from None


def sample_entry(sample: Sample) -> tuple[str, dict[str, Any]]:
    """``(dataset name, entry)`` of a sample (see the module docstring)."""
    md = sample.metadata or {}
    entry = md.get("reasoning_gym")
    if not isinstance(entry, dict):
        if "source_dataset" not in md:
            raise ValueError(
                f"sample group={sample.group_index} index={sample.index}: the reasoning_gym "
                "reward needs metadata['reasoning_gym'] (from the reasoning_gym data source) "
                f"or metadata['source_dataset']; metadata keys: {sorted(md)}"
            )
        question = sample.prompt if isinstance(sample.prompt, str) else ""
        entry = {"question": question, "answer": sample.label, "metadata": md}
    name = (entry.get("metadata") or {}).get("source_dataset") or md.get("task")
    if not name:
        raise ValueError(
            f"sample group={sample.group_index} index={sample.index}: no reasoning-gym dataset "
            "name (metadata['task'] or the entry's metadata['source_dataset'])"
        )
    return str(name), entry


def reasoning_gym_reward(sample: Sample) -> float:
    """The task's own score (usually 0.0..1.0) of the extracted answer."""
    name, entry = sample_entry(sample)
    scorer = score_fn(name)
    answer = extract_answer(sample.response or "")
    try:
        return float(scorer(answer, entry))
    except Exception as exc:  # noqa: BLE001 - the model's text must not crash scoring
        log.debug("reasoning_gym reward: %s scorer raised %s: %s; scored 0.0", name,
                  type(exc).__name__, exc)
        return 0.0


def make_reasoning_gym_reward(config: Any) -> Callable[[Sample], float]:
    """Record factory (no options)."""
    return reasoning_gym_reward
