"""The ``ray`` weight transport: Ray's object store (ray executor only).

Trainer rank 0 ``ray.put``s each bucket of ``weights.bucket_mb`` once (host memory); every
engine actor fetches the buckets (zero-copy on the same node) and applies the version in one
``update_weights`` call (:func:`receive`), so it never serves a half-updated model. The
newest version's refs are kept for a fault-tolerant re-sync of a restarted engine.
``bytes`` in the stats is what the engines received in total (payload x engines).
"""

from __future__ import annotations

import time
from typing import Any

from slime_core.weights.buckets import actor_handles, make_buckets, nbytes


class RayObjectTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config
        self.last_refs: list[Any] = []  # the newest version's buckets (fault-tolerant re-sync)

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        import ray

        handles = actor_handles(engines, "ray")
        t0 = time.perf_counter()
        host = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
        refs = [ray.put(b) for b in make_buckets(host, self.config.weights.bucket_mb)]
        # a list of refs is not resolved by Ray: each engine fetches the buckets itself
        ray.get([h.update_weights_from_refs.remote(refs, version) for h in handles])
        self.last_refs = refs
        return {"bytes": float(nbytes(host) * len(handles)),
                "seconds": time.perf_counter() - t0, "buckets": float(len(refs))}


def receive(engine: Any, refs: list[Any], version: int) -> None:
    """Engine side (in the engine actor): fetch every bucket, load them in one update."""
    import ray

    merged: dict[str, Any] = {}
    for part in ray.get(list(refs)):
        merged.update(part)
    engine.update_weights(merged, version)
