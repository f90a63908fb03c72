"""torch.distributed rendezvous for the ray executor: loopback-only stores, explicit groups.

Two kinds of groups exist: the data-parallel default group of the trainer ranks
(``init_process_group``) and the weight-broadcast group of trainer rank 0 plus the engines,
constructed directly (``ProcessGroupGloo(store, rank, size, options)``, or the creator a device
plugin registered for its backend) so it never clashes with the default group.

Security: a plain ``TCPStore`` master listens on every interface. Here the master gets a
socket already bound to ``host`` (``master_listen_fd``), so on the default ``127.0.0.1`` nothing
is reachable from outside the machine, and gloo's own connections bind to the same address.
Every key lives under a random prefix handed out through Ray (which authenticates its
callers with its token), so a process that reaches the store cannot guess the rendezvous
keys. torch.distributed itself has no authentication: across machines, run on a trusted
network (``ray.dist_host = "node"``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from typing import Any

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class StoreServer:
    """A ``TCPStore`` master listening only on ``host`` (the listening socket is kept open)."""

    def __init__(self, host: str, world_size: int, timeout_s: float) -> None:
        import torch.distributed as dist

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(max(64, 2 * world_size))
        self.host, self.port = host, int(self._sock.getsockname()[1])
        self.store: dist.TCPStore | None = dist.TCPStore(
            host, self.port, world_size, is_master=True,
            timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False,
            master_listen_fd=self._sock.fileno(),
        )

    def close(self) -> None:
        self.store = None
        # the TCPStore owned the listening fd and closed it when it was released: detach, so
        # a later close cannot hit another file that reused the descriptor number
        self._sock.detach()


def connect_store(host: str, port: int, world_size: int, timeout_s: float) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(host, port, world_size, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def resolve_host(config: Any) -> str:
    """``ray.dist_host``: "" -> 127.0.0.1, "node" -> this node's Ray address, else as given."""
    host = config.ray.dist_host
    if not host:
        return "127.0.0.1"
    if host == "node":
        import ray

        return str(ray.util.get_node_ip_address())
    return str(host)


def pin_interface(host: str) -> None:
    """Make gloo / nccl bind their data connections to loopback when the store is there."""
    if is_loopback(host):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


def new_group(backend: str, store: Any, prefix: str, rank: int, size: int, host: str,
              timeout_s: float) -> Any:
    """A process group of its own (not the default group) over ``store`` under ``prefix``."""
    import torch.distributed as dist

    prefixed = dist.PrefixStore(prefix, store)
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # private torch API, absent from its stubs
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        opts._timeout = timeout
        return dist.ProcessGroupGloo(prefixed, rank, size, opts)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(prefixed, rank, size, opts)
    # a device plugin's own backend (torch_npu's hccl): torch keeps the creator it registered
    # with Backend.register_backend; init_process_group calls it the same way
    plugin = dist.Backend._plugins.get(backend.upper())
    if plugin is not None and not plugin.extended_api:
        return plugin.creator_fn(prefixed, rank, size, timeout)
    raise ValueError(
        f"weight broadcast: torch.distributed backend {backend!r} is neither gloo, nccl nor a "
        "backend registered with torch.distributed.Backend.register_backend (without "
        "extended_api); use weights.transport = 'ray' or 'disk' for this accelerator"
    )


def broadcast(group: Any, tensor: Any, root: int = 0) -> None:
    import torch.distributed as dist

    opts = dist.BroadcastOptions()
    opts.rootRank = root
    group.broadcast([tensor], opts).wait()


def init_data_parallel(backend: str, host: str, port: int, prefix: str, rank: int,
                       world_size: int, timeout_s: float, server: StoreServer | None) -> None:
    """The trainer ranks' default process group (rank 0 passes its own store server)."""
    import torch.distributed as dist

    pin_interface(host)
    store = server.store if server is not None else connect_store(host, port, world_size,
                                                                   timeout_s)
    assert store is not None  # the server is not closed before the group is made
    dist.init_process_group(
        backend=backend, store=dist.PrefixStore(prefix, store), rank=rank,
        world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s),
    )
