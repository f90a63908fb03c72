"""The ``broadcast`` weight transport: torch.distributed from trainer rank 0 (ray executor only).

A process group of rank 0 (root) and the engine actors, built directly over a loopback-only
store (``slime_core.api.StoreServer``), gloo on CPU and nccl on GPU; each bucket of
``weights.bucket_mb`` is one flat byte tensor broadcast from rank 0, and an engine applies the
version only once every bucket has arrived, in one ``update_weights`` call (its engine side,
:class:`BroadcastEngineSide`), so it never serves a half-updated model. The group is rebuilt
when the set of engines changes (an engine restarted by fault tolerance). ``bytes`` in the
stats is what the engines received in total (payload x engines).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from slime_core.api import (
    StoreServer,
    accelerator_record,
    broadcast_tensor,
    connect_store,
    engine_actor_handles,
    engine_actor_ids,
    is_loopback_host,
    make_buckets,
    new_process_group,
    pack_bucket,
    pin_interface,
    resolve_dist_host,
    unpack_bucket,
)

NAME = "broadcast"


def check_reachable(host: str, root_ip: str, engine_ips: list[str]) -> None:
    """Refuse a loopback store when an engine runs on another machine (it would wait for a
    connection that cannot come until ``ray.collective_timeout_s``). Several raylets of one
    machine share its loopback, so machines are told apart by address, not by Ray node."""
    away = sorted({ip for ip in engine_ips if ip != root_ip})
    if away and is_loopback_host(host):
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

        self.reset()
        cfg = self.config
        host, size, timeout = resolve_dist_host(cfg), 1 + len(handles), cfg.ray.collective_timeout_s
        check_reachable(host, str(ray.util.get_node_ip_address()),
                        ray.get([h.node_ip.remote() for h in handles]))
        backend = self._backend()
        self._server = StoreServer(host, size, timeout)
        prefix = f"slime-weights-{secrets.token_hex(16)}/"  # handed out through Ray only
        joins = [h.weight_transport_call.remote(NAME, "join", host, self._server.port, prefix,
                                                i + 1, size, backend, timeout)
                 for i, h in enumerate(handles)]
        self.group = new_process_group(backend, self._server.store, prefix, 0, size, host,
                                       timeout)
        ray.get(joins)
        self._members = engine_actor_ids(handles)

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        import ray

        handles = engine_actor_handles(engines, NAME)
        t0 = time.perf_counter()
        if self.group is None or self._members != engine_actor_ids(handles):
            self._setup(handles)
        device = self._device(self._backend())
        packed = [pack_bucket(b, device) for b in make_buckets(weights, self.config.weights.bucket_mb)]
        receiving = [h.weight_transport_call.remote(NAME, "receive", [m for _, m in packed],
                                                    version)
                     for h in handles]
        total = 0
        for buf, _ in packed:
            broadcast_tensor(self.group, buf, root=0)
            total += int(buf.numel())
        ray.get(receiving)
        return {"bytes": float(total * len(handles)), "seconds": time.perf_counter() - t0,
                "buckets": float(len(packed))}


class BroadcastEngineSide:
    """In the engine actor: join rank 0's group, then receive every version through it."""

    def __init__(self, config: Any, engine: Any) -> None:
        self.engine = engine
        self.group: Any = None
        self.backend = "gloo"

    def join(self, host: str, port: int, prefix: str, rank: int, size: int, backend: str,
             timeout_s: float) -> None:
        """Join rank 0's broadcast group (a new one replaces the old)."""
        pin_interface(host)
        store = connect_store(host, port, size, timeout_s)
        self.group = new_process_group(backend, store, prefix, rank, size, host, timeout_s)
        self.backend = backend

    def receive(self, metas: list[Any], version: int) -> None:
        """Every bucket from rank 0 (``metas``: what ``pack_bucket`` gave for each), then one
        ``update_weights``."""
        import torch

        if self.group is None:
            raise RuntimeError("broadcast transport: this engine joined no weight group")
        device = getattr(self.engine, "device", None)
        if device is None or self.backend == "gloo":  # gloo moves host tensors
            device = torch.device("cpu")
        merged: dict[str, Any] = {}
        for meta in metas:
            buf = torch.empty(sum(m[3] for m in meta), dtype=torch.uint8, device=device)
            broadcast_tensor(self.group, buf, root=0)
            merged.update(unpack_bucket(buf, meta))
        self.engine.update_weights(merged, version)
