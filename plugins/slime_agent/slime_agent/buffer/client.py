"""A synchronous client of the rollout-buffer service, for trainers and agent workers."""

from __future__ import annotations

import urllib.parse
from typing import Any

from slime_agent.http import JsonClient


class RolloutBufferClient:
    """Methods named after the endpoints of :mod:`slime_agent.buffer.server`."""

    def __init__(self, url: str, token: str, timeout: float = 120.0) -> None:
        self.http = JsonClient(url, token, timeout)
        self.url = url

    # trainer
    def start(self, task: dict[str, Any]) -> dict[str, Any]:
        return self.http.post("/start_rollout", task)

    def add_prompts(self, instances: list[dict[str, Any]]) -> int:
        return int(self.http.post("/prompts", {"instances": instances})["added"])

    def get_rollout_data(self, num_groups: int, wait: float = 0.0) -> dict[str, Any]:
        query = urllib.parse.urlencode({"num_groups": num_groups, "wait": wait})
        return self.http.get(f"/get_rollout_data?{query}", timeout=wait + self.http.timeout)

    def status(self) -> dict[str, Any]:
        return self.http.get("/status")

    def stop(self) -> None:
        self.http.post("/stop", {})

    # workers
    def next_job(self, wait: float = 0.0) -> dict[str, Any]:
        return self.http.get(f"/task?wait={wait}", timeout=wait + self.http.timeout)

    def write(self, instance_id: str, slot: int, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return self.http.post("/buffer/write",
                              {"instance_id": instance_id, "slot": slot, "samples": samples})
