"""The ``inprocess`` weight transport: engines in the trainer's process copy its tensors
(no shared storage)."""

from __future__ import annotations

import time
from typing import Any

from slime_core.api import weights_nbytes


class InProcessTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        t0 = time.perf_counter()
        for e in engines:
            e.update_weights(weights, version)
        return {"bytes": float(weights_nbytes(weights) * len(engines)),
                "seconds": time.perf_counter() - t0}
