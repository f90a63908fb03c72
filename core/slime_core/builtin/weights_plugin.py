"""Built-in plugin ``core_weights``: the ``inprocess`` weight transport.

The engine receives the trainer's tensors directly (same process) and copies them into its
own parameters, so trainer and engine never share storage.
"""

from __future__ import annotations

import time
from typing import Any

from slime_hookspecs import WeightTransportRecord, hookimpl


class InProcessTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        t0 = time.perf_counter()
        nbytes = sum(int(t.numel()) * int(t.element_size()) for t in weights.values())
        for e in engines:
            e.update_weights(weights, version)
        return {"bytes": float(nbytes * len(engines)), "seconds": time.perf_counter() - t0}


@hookimpl
def slime_register_weight_transports() -> list[WeightTransportRecord]:
    return [WeightTransportRecord(
        name="inprocess", factory=InProcessTransport,
        summary="engines in the trainer's process copy the trainer's tensors",
    )]
