"""The agent of the fully-async ``agent.entrypoint`` tests: several turns through the official
async client, each answer's finish reason and the episode's attempts kept in the sample's
metadata (the merged sample keeps what the agent wrote there, a restarted one too), and a
count of its requests in flight that a test plugin waits on to time a weight update."""

from __future__ import annotations

import threading
from typing import Any

from openai import AsyncOpenAI
from slime_agent import rollout_entrypoint

TURNS = 3
_lock = threading.Lock()
LATE_IN_FLIGHT = 0  # requests in flight of episodes past their first answer


def late_in_flight() -> int:
    with _lock:
        return LATE_IN_FLIGHT


def _count(turn: int, delta: int) -> None:
    global LATE_IN_FLIGHT
    if turn:
        with _lock:
            LATE_IN_FLIGHT += delta


@rollout_entrypoint
async def rollout(client: AsyncOpenAI, model: str, prompt: str, sampling: dict[str, Any],
                  sample: Any) -> float:
    meta = sample.metadata
    meta["attempts"] = meta.get("attempts", 0) + 1
    meta["finish_reasons"] = []
    messages = [{"role": "user", "content": prompt}]
    for turn in range(TURNS):
        _count(turn, 1)
        try:
            r = await client.chat.completions.create(model=model, messages=messages, **sampling)
        finally:
            _count(turn, -1)
        meta["finish_reasons"].append(r.choices[0].finish_reason)
        meta["aborted_answers"] = meta.get("aborted_answers", 0) + (
            r.choices[0].finish_reason == "abort")
        messages += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                     {"role": "user", "content": prompt}]
    return 0.1 * (sample.index % 3)  # varied within a group: the advantages are not all 0
