"""Where the cluster's address and credentials come from, and the shared API client.

:func:`config_source` is import-light (the availability probe calls it); :func:`api_client`
imports ``kubernetes`` when first called.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

_clients: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def in_cluster() -> bool:
    """True inside a pod with a mounted service account (what ``load_incluster_config`` needs)."""
    return bool(
        os.environ.get("KUBERNETES_SERVICE_HOST")
        and os.environ.get("KUBERNETES_SERVICE_PORT")
        and os.path.isfile(SERVICE_ACCOUNT_TOKEN)
    )


def kubeconfig_paths(explicit: str = "") -> list[str]:
    """Existing kubeconfig files: ``explicit``, else ``$KUBECONFIG``'s, else ~/.kube/config."""
    if explicit:
        candidates = [explicit]
    elif os.environ.get("KUBECONFIG"):
        candidates = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        candidates = [str(Path.home() / ".kube" / "config")]
    return [p for p in candidates if os.path.isfile(os.path.expanduser(p))]


def config_source(kubeconfig: str = "") -> str | None:
    """``"kubeconfig:<path>"``, ``"in-cluster"`` or ``None`` when nothing is configured.

    An explicit or ``$KUBECONFIG`` file wins over the in-cluster service account, as in kubectl.
    """
    paths = kubeconfig_paths(kubeconfig)
    if paths:
        return f"kubeconfig:{paths[0]}"
    if in_cluster():
        return "in-cluster"
    return None


def api_client(kubeconfig: str = "", context: str = "") -> Any:
    """One ``kubernetes.client.ApiClient`` per (kubeconfig, context) and process."""
    key = (kubeconfig, context)
    with _lock:
        if key in _clients:
            return _clients[key]
        from kubernetes import client, config

        source = config_source(kubeconfig)
        if source is None:
            raise RuntimeError(
                "sandbox_k8s: no Kubernetes configuration found (KUBECONFIG / in-cluster); "
                "set KUBECONFIG, pass kubeconfig=..., or run inside a pod"
            )
        if source == "in-cluster":
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            made = client.ApiClient(configuration)
        else:
            # config_file=None lets the client read (and merge) $KUBECONFIG itself
            made = config.new_client_from_config(
                config_file=kubeconfig or None, context=context or None
            )
        _clients[key] = made
        return made
