"""The ``ray`` weight transport: Ray's object store (ray executor only).

Trainer rank 0 ``ray.put``s each bucket of ``weights.bucket_mb`` once (host memory); every
engine actor fetches the buckets (zero-copy on the same node) and applies the version in one
``update_weights`` call (its engine side, :class:`RayStoreEngineSide`), so it never serves a
half-updated model. The newest version's refs are kept for a fault-tolerant re-sync of a
restarted engine (``last_refs``). ``bytes`` in the stats is what the engines received in
total (payload x engines).
"""

from __future__ import annotations

import time
from typing import Any

from slime_core.api import engine_actor_handles, make_buckets, weights_nbytes

NAME = "ray"


class RayObjectTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config
        self.last_refs: list[Any] = []  # the newest version's buckets (fault-tolerant re-sync)

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        import ray

        handles = engine_actor_handles(engines, NAME)
        t0 = time.perf_counter()
        host = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
        refs = [ray.put(b) for b in make_buckets(host, self.config.weights.bucket_mb)]
        # a list of refs is not resolved by Ray: each engine fetches the buckets itself
        ray.get([h.weight_transport_call.remote(NAME, "receive", refs, version)
                 for h in handles])
        self.last_refs = refs
        return {"bytes": float(weights_nbytes(host) * len(handles)),
                "seconds": time.perf_counter() - t0, "buckets": float(len(refs))}


class RayStoreEngineSide:
    """In the engine actor: fetch every bucket, load them in one update."""

    def __init__(self, config: Any, engine: Any) -> None:
        self.engine = engine

    def receive(self, refs: list[Any], version: int) -> None:
        import ray

        merged: dict[str, Any] = {}
        for part in ray.get(list(refs)):
            merged.update(part)
        self.engine.update_weights(merged, version)
