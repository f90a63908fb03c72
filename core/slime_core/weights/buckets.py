"""What weight transports share: buckets, their wire format, byte counts, the Ray actors of
engines (exported by :mod:`slime_core.api`; ``core gpu-check`` uses the buckets too)."""

from __future__ import annotations

from typing import Any

BucketMeta = list[tuple[str, str, tuple[int, ...], int]]  # name, dtype, shape, nbytes


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


def pack_bucket(bucket: dict[str, Any], device: Any) -> tuple[Any, BucketMeta]:
    """One flat uint8 tensor of a bucket's tensors, plus what is needed to cut it up again."""
    import torch

    meta: BucketMeta = []
    parts = []
    for name, t in bucket.items():
        flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
        meta.append((name, str(t.dtype).removeprefix("torch."), tuple(t.shape), int(flat.numel())))
        parts.append(flat)
    return torch.cat(parts).to(device), meta


def unpack_bucket(buf: Any, meta: BucketMeta) -> dict[str, Any]:
    """The tensors of a bucket packed by :func:`pack_bucket` (``buf`` on any device)."""
    import torch

    out = {}
    offset = 0
    for name, dtype, shape, n in meta:
        # clone first: a byte slice at an odd offset cannot be viewed as a wider dtype
        out[name] = buf[offset:offset + n].clone().view(getattr(torch, dtype)).reshape(shape)
        offset += n
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
