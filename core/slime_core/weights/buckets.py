"""What the weight transports share: buckets, byte counts, the Ray actors of engines."""

from __future__ import annotations

from typing import Any


def nbytes(weights: dict[str, Any]) -> int:
    """The bytes of a name -> tensor mapping."""
    return sum(int(t.numel()) * int(t.element_size()) for t in weights.values())


def make_buckets(weights: dict[str, Any], bucket_mb: int) -> list[dict[str, Any]]:
    """Consecutive tensors up to ``bucket_mb`` MiB each (a larger tensor is its own bucket)."""
    limit = bucket_mb * 2**20
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    size = 0
    for name, t in weights.items():
        n = int(t.numel()) * int(t.element_size())
        if cur and size + n > limit:
            out.append(cur)
            cur, size = {}, 0
        cur[name] = t
        size += n
    if cur:
        out.append(cur)
    return out


def actor_handles(engines: list[Any], transport: str) -> list[Any]:
    """The Ray actor handle of each engine (:class:`~slime_core.executors.ray_workers.RemoteEngine`);
    fails naming ``transport`` when an engine is not an actor."""
    handles = [getattr(e, "handle", None) for e in engines]
    if any(h is None for h in handles):
        raise RuntimeError(
            f"weights.transport = {transport!r} sends to Ray engine actors; it needs "
            "run.executor = 'ray' (use 'inprocess' or 'disk' with the local executor)"
        )
    return handles


def actor_ids(handles: list[Any]) -> list[str]:
    return [h._actor_id.hex() for h in handles]
