"""The ``broadcast`` weight transport: torch.distributed from trainer rank 0 (ray executor only).

A process group of rank 0 (root) and the engine actors, built directly over a loopback-only
store (see :mod:`~slime_core.runtime.dist_group`), gloo on CPU and nccl on GPU; each bucket
of ``weights.bucket_mb`` is one flat byte tensor broadcast from rank 0, and an engine applies
the version only once every bucket has arrived, in one ``update_weights`` call
(:func:`receive`), so it never serves a half-updated model. The group is rebuilt when the set
of engines changes (an engine restarted by fault tolerance). ``bytes`` in the stats is what
the engines received in total (payload x engines).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from slime_core.weights.buckets import actor_handles, actor_ids, make_buckets

BucketMeta = list[tuple[str, str, tuple[int, ...], int]]  # name, dtype, shape, nbytes


def pack(bucket: dict[str, Any], device: Any) -> tuple[Any, BucketMeta]:
    """One flat uint8 tensor of a bucket's tensors, plus what is needed to cut it up again."""
    import torch

    meta: BucketMeta = []
    parts = []
    for name, t in bucket.items():
        flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
        meta.append((name, str(t.dtype).removeprefix("torch."), tuple(t.shape), int(flat.numel())))
        parts.append(flat)
    return torch.cat(parts).to(device), meta


def unpack(buf: Any, meta: BucketMeta) -> dict[str, Any]:
    import torch

    out = {}
    offset = 0
    for name, dtype, shape, n in meta:
        # clone first: a byte slice at an odd offset cannot be viewed as a wider dtype
        out[name] = buf[offset:offset + n].clone().view(getattr(torch, dtype)).reshape(shape)
        offset += n
    return out


def check_reachable(host: str, root_ip: str, engine_ips: list[str]) -> None:
    """Refuse a loopback store when an engine runs on another machine (it would wait for a
    connection that cannot come until ``ray.collective_timeout_s``). Several raylets of one
    machine share its loopback, so machines are told apart by address, not by Ray node."""
    from slime_core.runtime.dist_group import is_loopback

    away = sorted({ip for ip in engine_ips if ip != root_ip})
    if away and is_loopback(host):
        raise RuntimeError(
            f"weights.transport = 'broadcast': engines on {', '.join(away)} cannot reach "
            f"trainer rank 0's store on {host} ({root_ip}); set ray.dist_host = 'node' (rank "
            "0's address) on a trusted network, or use weights.transport = 'ray'"
        )


class BroadcastTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config
        self.accelerator = accelerator
        self.group: Any = None
        self._server: Any = None
        self._members: list[Any] = []

    def _backend(self) -> str:
        from slime_core.runtime.accelerator import accelerator_record

        return accelerator_record(self.config).dist_backend

    def _device(self, backend: str) -> Any:
        import torch

        if backend == "gloo" or self.accelerator is None:
            return torch.device("cpu")
        return self.accelerator.device(0)

    def reset(self) -> None:
        """Forget the group (an engine was restarted); the next send builds a new one."""
        self.group = None
        if self._server is not None:
            self._server.close()
            self._server = None

    def _setup(self, handles: list[Any]) -> None:
        import ray

        from slime_core.runtime.dist_group import StoreServer, new_group, resolve_host

        self.reset()
        cfg = self.config
        host, size, timeout = resolve_host(cfg), 1 + len(handles), cfg.ray.collective_timeout_s
        check_reachable(host, str(ray.util.get_node_ip_address()),
                        ray.get([h.node_ip.remote() for h in handles]))
        backend = self._backend()
        self._server = StoreServer(host, size, timeout)
        prefix = f"slime-weights-{secrets.token_hex(16)}/"  # handed out through Ray only
        joins = [h.join_weight_group.remote(host, self._server.port, prefix, i + 1, size,
                                            backend, timeout)
                 for i, h in enumerate(handles)]
        self.group = new_group(backend, self._server.store, prefix, 0, size, host, timeout)
        ray.get(joins)
        self._members = actor_ids(handles)

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        import ray

        from slime_core.runtime.dist_group import broadcast

        handles = actor_handles(engines, "broadcast")
        t0 = time.perf_counter()
        if self.group is None or self._members != actor_ids(handles):
            self._setup(handles)
        device = self._device(self._backend())
        packed = [pack(b, device) for b in make_buckets(weights, self.config.weights.bucket_mb)]
        receiving = [h.receive_weights.remote([m for _, m in packed], version) for h in handles]
        total = 0
        for buf, _ in packed:
            broadcast(self.group, buf, root=0)
            total += int(buf.numel())
        ray.get(receiving)
        return {"bytes": float(total * len(handles)), "seconds": time.perf_counter() - t0,
                "buckets": float(len(packed))}


def join(host: str, port: int, prefix: str, rank: int, size: int, backend: str,
         timeout_s: float) -> Any:
    """Engine side (in the engine actor): join rank 0's broadcast group; returns the group."""
    from slime_core.runtime.dist_group import connect_store, new_group, pin_interface

    pin_interface(host)
    store = connect_store(host, port, size, timeout_s)
    return new_group(backend, store, prefix, rank, size, host, timeout_s)


def receive(engine: Any, group: Any, backend: str, metas: list[BucketMeta], version: int) -> None:
    """Engine side (in the engine actor): every bucket from rank 0, then one ``update_weights``."""
    import torch

    from slime_core.runtime.dist_group import broadcast

    device = getattr(engine, "device", None)
    if device is None or backend == "gloo":  # gloo moves host tensors
        device = torch.device("cpu")
    merged: dict[str, Any] = {}
    for meta in metas:
        buf = torch.empty(sum(m[3] for m in meta), dtype=torch.uint8, device=device)
        broadcast(group, buf, root=0)
        merged.update(unpack(buf, meta))
    engine.update_weights(merged, version)
