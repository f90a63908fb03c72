"""Options of a Kubernetes sandbox and the objects built from them (plain dicts).

Nothing here imports ``kubernetes``: the Pod and the NetworkPolicy are JSON-shaped dicts,
which every version of the official client accepts as request bodies, and which tests can
compare field by field.
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "slime"
RUN_ID_LABEL = "slime.run-id"
CONTAINER_NAME = "sandbox"
POD_NAME_PREFIX = "slime-sbx-"
NETWORK_POLICY_PREFIX = "slime-deny-egress-"

_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$")

_PROCESS_RUN_ID: str | None = None


def default_run_id() -> str:
    """``$SLIME_RUN_ID`` if set, else one random id per process (stable for its lifetime)."""
    global _PROCESS_RUN_ID
    env = os.environ.get("SLIME_RUN_ID")
    if env:
        return sanitize_label_value(env)
    if _PROCESS_RUN_ID is None:
        _PROCESS_RUN_ID = uuid.uuid4().hex[:12]
    return _PROCESS_RUN_ID


def sanitize_label_value(value: str) -> str:
    """Turn ``value`` into a valid label value (63 chars, alphanumeric at both ends)."""
    cleaned = re.sub(r"[^-A-Za-z0-9_.]", "-", str(value))[:63].strip("-_.")
    return cleaned or "run"


@dataclass
class K8sSandboxOptions:
    """Every option of the ``k8s`` sandbox; ``K8sSandbox(**options)`` takes the same names."""

    namespace: str = "default"
    image: str = "python:3.12-slim"
    cpu_limit: str = "1"
    memory_limit: str = "1Gi"
    cpu_request: str = "100m"
    memory_request: str = "256Mi"
    ephemeral_storage_limit: str = "1Gi"  # also the size limit of the /workspace emptyDir
    deadline_s: int = 3600  # activeDeadlineSeconds, and how long the container's sleep lasts
    run_id: str = ""  # empty: $SLIME_RUN_ID or one random id per process
    deny_egress: bool = True  # create a deny-all egress NetworkPolicy for the run's pods
    startup_timeout_s: float = 120.0  # wait this long for the pod to be Running
    poll_interval_s: float = 0.5
    max_output_bytes: int = 1 << 20  # cap of stdout and of stderr, each, per exec
    max_file_bytes: int = 64 << 20  # cap of read_file
    workdir: str = "/workspace"  # emptyDir; relative paths of write_file/read_file land here
    run_as_user: int = 65534  # nobody
    image_pull_policy: str = "IfNotPresent"
    labels: dict[str, str] = field(default_factory=dict)  # extra pod labels
    node_selector: dict[str, str] = field(default_factory=dict)
    kubeconfig: str = ""  # empty: in-cluster config, else $KUBECONFIG / ~/.kube/config
    context: str = ""  # kubeconfig context (empty: current)

    def __post_init__(self) -> None:
        if not self.run_id:
            self.run_id = default_run_id()
        self.run_id = sanitize_label_value(self.run_id)
        for key in ("cpu_limit", "memory_limit", "cpu_request", "memory_request",
                    "ephemeral_storage_limit"):
            value = str(getattr(self, key))
            if not _QUANTITY.match(value):
                raise ValueError(f"sandbox_k8s: {key}={value!r} is not a Kubernetes quantity")
            setattr(self, key, value)
        if int(self.deadline_s) < 1:
            raise ValueError("sandbox_k8s: deadline_s must be >= 1")
        if self.run_as_user == 0:
            raise ValueError("sandbox_k8s: run_as_user must not be 0 (the pod runs as non-root)")
        if not self.workdir.startswith("/"):
            raise ValueError(f"sandbox_k8s: workdir={self.workdir!r} must be absolute")
        for key, value in self.labels.items():
            if not _LABEL_VALUE.match(str(value)):
                raise ValueError(f"sandbox_k8s: label {key}={value!r} is not a valid label value")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> K8sSandboxOptions:
        """Build from a dict; an unknown key fails listing the valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TypeError(
                f"sandbox_k8s: unknown option(s) {', '.join(unknown)}; "
                f"choose from: {', '.join(sorted(names))}"
            )
        return cls(**values)


def run_labels(run_id: str) -> dict[str, str]:
    """The labels that mark a run's objects (pods and the NetworkPolicy)."""
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, RUN_ID_LABEL: run_id}


def label_selector(run_id: str | None = None) -> str:
    """``managed-by=slime[,slime.run-id=<run_id>]``, as the API's ``labelSelector``."""
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
    if run_id:
        selector += f",{RUN_ID_LABEL}={sanitize_label_value(run_id)}"
    return selector


def new_pod_name() -> str:
    return POD_NAME_PREFIX + uuid.uuid4().hex[:12]


def network_policy_name(run_id: str) -> str:
    return (NETWORK_POLICY_PREFIX + run_id)[:253]


def build_pod_manifest(name: str, opts: K8sSandboxOptions) -> dict[str, Any]:
    """The Pod of one sandbox: one container sleeping for the deadline, non-root, no token."""
    labels = {**opts.labels, **run_labels(opts.run_id)}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(opts.deadline_s),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": opts.run_as_user,
            "runAsGroup": opts.run_as_user,
            "fsGroup": opts.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": opts.image,
                "imagePullPolicy": opts.image_pull_policy,
                "command": ["sleep", str(int(opts.deadline_s))],
                "workingDir": opts.workdir,
                "resources": {
                    "limits": {
                        "cpu": opts.cpu_limit,
                        "memory": opts.memory_limit,
                        "ephemeral-storage": opts.ephemeral_storage_limit,
                    },
                    "requests": {"cpu": opts.cpu_request, "memory": opts.memory_request},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "workspace", "mountPath": opts.workdir}],
            }
        ],
        "volumes": [
            {"name": "workspace", "emptyDir": {"sizeLimit": opts.ephemeral_storage_limit}}
        ],
    }
    if opts.node_selector:
        spec["nodeSelector"] = dict(opts.node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels},
        "spec": spec,
    }


def build_network_policy(namespace: str, run_id: str) -> dict[str, Any]:
    """Deny all egress of the run's pods (selected by label); ingress is left alone."""
    labels = run_labels(run_id)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": network_policy_name(run_id), "namespace": namespace,
                     "labels": labels},
        "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Egress"],
                 "egress": []},
    }
