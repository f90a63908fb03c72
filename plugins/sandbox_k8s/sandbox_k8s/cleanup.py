"""Delete sandbox pods that a crashed run left behind.

A pod also ends by itself at ``activeDeadlineSeconds``, but it keeps its resource requests
until then; ``sweep`` frees them now. Usage::

    from sandbox_k8s import sweep
    sweep("tools", run_id="3f2a9c0d1e4b")        # every pod of that run
    sweep("tools", older_than_s=6 * 3600)        # every slime pod older than 6 hours
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sandbox_k8s.manifests import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    RUN_ID_LABEL,
    label_selector,
    network_policy_name,
    sanitize_label_value,
)


def sweep(
    namespace: str = "default",
    run_id: str | None = None,
    older_than_s: float | None = None,
    *,
    api_client: Any = None,
    kubeconfig: str = "",
    context: str = "",
) -> list[str]:
    """Delete slime's sandbox pods in ``namespace``; return the names deleted.

    Pods are listed by the label selector ``app.kubernetes.io/managed-by=slime`` (plus
    ``slime.run-id=<run_id>`` when given); each listed pod's labels are checked again here
    before it is deleted (grace period 0), so a pod without slime's labels is never touched.
    ``older_than_s`` keeps pods created less than that many seconds ago (live runs).

    With ``run_id`` and no ``older_than_s`` the run is taken as finished and its deny-egress
    NetworkPolicy is deleted too; otherwise NetworkPolicies are left alone (a live run's pods
    rely on theirs).
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    if api_client is None:
        from sandbox_k8s.client import api_client as shared

        api_client = shared(kubeconfig, context)
    core = client.CoreV1Api(api_client)
    wanted_run = sanitize_label_value(run_id) if run_id else None
    now = dt.datetime.now(dt.timezone.utc)
    deleted: list[str] = []
    pods = core.list_namespaced_pod(namespace, label_selector=label_selector(wanted_run))
    for pod in pods.items:
        meta = pod.metadata
        labels = meta.labels or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            continue
        if wanted_run is not None and labels.get(RUN_ID_LABEL) != wanted_run:
            continue
        if older_than_s is not None and not _older_than(meta.creation_timestamp, now,
                                                        older_than_s):
            continue
        try:
            core.delete_namespaced_pod(meta.name, namespace,
                                       body=client.V1DeleteOptions(grace_period_seconds=0),
                                       grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:  # already gone: somebody else swept it
                raise
            continue
        deleted.append(meta.name)
    if wanted_run is not None and older_than_s is None:
        try:
            client.NetworkingV1Api(api_client).delete_namespaced_network_policy(
                network_policy_name(wanted_run), namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return deleted


def _older_than(created: Any, now: dt.datetime, seconds: float) -> bool:
    """True when ``created`` is more than ``seconds`` before ``now``; unknown age is kept."""
    if created is None:
        return False
    if isinstance(created, str):
        created = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.timezone.utc)
    return (now - created).total_seconds() > seconds
