"""The agent of the fully-async ``agent.entrypoint`` tests: several turns through the official
async client, each answer's finish reason and the episode's attempts kept in the sample's
metadata (the merged sample keeps what the agent wrote there, a restarted one too), and a
count of its requests in flight that a test plugin waits on to time a weight update. Under
``[ray_test] agent_waits_for_update`` (``tests.ray_plugins``), an episode of a group after the
first waits after its first answer until the rollout manager has resumed from a weight update,
so it spans one (60 s at most: without a hold the update waits for the episode instead)."""

from __future__ import annotations

import asyncio
import threading
import time
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


async def _until_an_update() -> None:
    from tests import ray_plugins

    deadline = time.monotonic() + 60.0
    while ray_plugins.AGENT_WAITS and not ray_plugins.RELEASED.is_set():
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.01)


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
        if turn == 0 and sample.group_index >= 1:
            await _until_an_update()
        meta["aborted_answers"] = meta.get("aborted_answers", 0) + (
            r.choices[0].finish_reason == "abort")
        messages += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                     {"role": "user", "content": prompt}]
    return 0.1 * (sample.index % 3)  # varied within a group: the advantages are not all 0
