"""Connect to Ray, or start a local instance, keeping the control plane private.

* No ``run.ray_address``: start a local instance, without the dashboard, whose every
  listening socket (GCS, raylet, workers, the dashboard agent, the runtime-env agent and the
  Prometheus metrics exporters) is bound to 127.0.0.1 (see :func:`start_local_ray`). Ray's
  token authentication (on by default since Ray 2.60) stays on as well
  (``RAY_AUTH_MODE=disabled`` is refused).
* ``run.ray_address`` on another machine: a token must be available to this process
  (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``), so the run only talks
  to clusters that authenticate their callers.
* Ray already initialised in this process (a test fixture, a notebook): reuse it and leave
  it running at the end (``ray.runtime_env`` is then the caller's to pass to ``ray.init``).
* ``ray.runtime_env`` is the job's runtime environment on a cluster or a local instance.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from slime_core.runtime.dist_group import is_loopback


def check_token_auth() -> None:
    mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower()
    if mode == "disabled":
        raise RuntimeError(
            "RAY_AUTH_MODE=disabled: slime keeps Ray's token authentication on (anyone who "
            "reaches an unauthenticated Ray cluster can run code on it); unset RAY_AUTH_MODE"
        )


def token_available() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return Path(path).is_file()
    return (Path.home() / ".ray" / "auth_token").is_file()


def address_host(address: str) -> str:
    """``ray://h:10001`` / ``h:6379`` / ``auto`` -> host part (``auto`` and ``local`` -> 127.0.0.1)."""
    if address in ("auto", "local"):
        return "127.0.0.1"
    rest = address.split("://", 1)[-1]
    if rest.startswith("["):  # [::1]:6379
        return rest[1:rest.index("]")]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


# Ray's switch for "this machine only" (Ray's name: clusters disabled). With it Ray keeps
# 127.0.0.1 as the node address instead of swapping it for the machine's routable one, and its
# servers then bind loopback only: the C++ gRPC servers listen on 127.0.0.1 when the node
# address is 127.0.0.1, and the agents and metrics exporters when it is a localhost address.
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def loopback_only() -> Iterator[None]:
    """Ray's local-only switch while Ray processes are started on this machine.

    The switch is read by Ray at import time and by the processes Ray starts, so it is set in
    both and restored in this process afterwards (a later ``ray.init(address=...)`` to a real
    cluster in the same process is unaffected). Tests that start several raylets on one
    machine (``ray.cluster_utils.Cluster``) wrap every ``add_node`` in it.
    """
    from ray._private import ray_constants

    before_env = os.environ.get(LOCAL_ONLY_ENV)
    before_const = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOCAL_ONLY_ENV] = "0"  # inherited by GCS, raylet, agents and workers
    ray_constants.ENABLE_RAY_CLUSTER = False  # already imported: Ray read the env var before
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_const
        if before_env is None:
            os.environ.pop(LOCAL_ONLY_ENV, None)
        else:
            os.environ[LOCAL_ONLY_ENV] = before_env


def start_local_ray(num_cpus: int = 0, **kwargs: Any) -> None:
    """A private local Ray instance: every socket on 127.0.0.1, no dashboard, token auth on.

    ``ray.init(_node_ip_address="127.0.0.1")`` alone does not do it: Ray resolves a loopback
    node address to the machine's routable address unless clusters are disabled, and every
    server then binds all interfaces (the Prometheus exporters without any authentication).
    ``address="local"``: without it ``ray.init`` joins the cluster that the last ``ray start``
    on this machine recorded in ``/tmp/ray/ray_current_cluster`` (or fails on a stale record),
    instead of starting the private instance.
    """
    import ray

    check_token_auth()
    with loopback_only():
        ray.init(
            address="local", num_cpus=num_cpus or None, include_dashboard=False,
            _node_ip_address="127.0.0.1", logging_level="WARNING", **kwargs,  # type: ignore[arg-type]  # ray takes a level name; its annotation says int
        )


class RayConnection:
    """Ray for one run; ``close()`` stops only what this object started."""

    def __init__(self, config: Any, cpus_needed: float) -> None:
        import ray

        self.owned = False
        if ray.is_initialized():
            return
        address = config.run.ray_address
        # the job's runtime environment reaches every worker on every node (e.g. py_modules
        # carrying plugin modules that are not installed there)
        runtime_env = dict(config.ray.runtime_env) or None
        check_token_auth()
        if address:
            if not is_loopback(address_host(address)) and not token_available():
                raise RuntimeError(
                    f"run.ray_address = {address!r} is not on this machine: the run connects "
                    "only with Ray's token authentication; provide the cluster's token "
                    "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
                )
            ray.init(address=address, logging_level="WARNING", runtime_env=runtime_env)  # type: ignore[arg-type]  # as above
        else:
            wanted = config.ray.num_cpus or max(os.cpu_count() or 1, int(-(-cpus_needed // 1)))
            start_local_ray(wanted, resources=dict(config.ray.resources) or None,
                            runtime_env=runtime_env)
        self.owned = True

    def close(self) -> None:
        if self.owned:
            import ray

            ray.shutdown()
            self.owned = False
