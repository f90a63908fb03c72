"""The Pod and NetworkPolicy built for a sandbox, field by field (no cluster needed)."""

from __future__ import annotations

import pytest

from sandbox_k8s.manifests import (
    K8sSandboxOptions,
    build_network_policy,
    build_pod_manifest,
    default_run_id,
    label_selector,
    new_pod_name,
    sanitize_label_value,
)


def test_pod_spec_fields():
    opts = K8sSandboxOptions(namespace="tools", run_id="run-7", cpu_limit="2",
                             memory_limit="2Gi", cpu_request="500m", memory_request="512Mi",
                             deadline_s=900, labels={"team": "rl"})
    pod = build_pod_manifest("slime-sbx-abc", opts)
    assert pod["metadata"] == {
        "name": "slime-sbx-abc", "namespace": "tools",
        "labels": {"team": "rl", "app.kubernetes.io/managed-by": "slime",
                   "slime.run-id": "run-7"},
    }
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 900
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65534
    (c,) = spec["containers"]
    assert c["image"] == "python:3.12-slim"
    assert c["command"] == ["sleep", "900"]
    assert c["resources"]["limits"]["cpu"] == "2"
    assert c["resources"]["limits"]["memory"] == "2Gi"
    assert c["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["workingDir"] == "/workspace"
    assert spec["volumes"][0]["emptyDir"]["sizeLimit"] == "1Gi"
    assert "nodeSelector" not in spec


def test_user_labels_cannot_override_slime_labels():
    opts = K8sSandboxOptions(run_id="mine", labels={"slime.run-id": "other"})
    assert build_pod_manifest("p", opts)["metadata"]["labels"]["slime.run-id"] == "mine"


def test_network_policy_denies_all_egress_of_the_run():
    np = build_network_policy("tools", "run-7")
    labels = {"app.kubernetes.io/managed-by": "slime", "slime.run-id": "run-7"}
    assert np["kind"] == "NetworkPolicy"
    assert np["metadata"]["name"] == "slime-deny-egress-run-7"
    assert np["spec"] == {"podSelector": {"matchLabels": labels}, "policyTypes": ["Egress"],
                          "egress": []}


def test_label_selector():
    assert label_selector() == "app.kubernetes.io/managed-by=slime"
    assert label_selector("r 1") == "app.kubernetes.io/managed-by=slime,slime.run-id=r-1"


def test_run_id_defaults(monkeypatch):
    monkeypatch.delenv("SLIME_RUN_ID", raising=False)
    assert K8sSandboxOptions().run_id == default_run_id() == K8sSandboxOptions().run_id
    monkeypatch.setenv("SLIME_RUN_ID", "runs/slime-2026-11-01T10:00")
    assert K8sSandboxOptions().run_id == "runs-slime-2026-11-01T10-00"


def test_sanitize_label_value():
    assert sanitize_label_value("-a" * 50).startswith("a")
    assert len(sanitize_label_value("x" * 99)) == 63
    assert sanitize_label_value("///") == "run"


@pytest.mark.parametrize("kwargs,match", [
    ({"cpu_limit": "lots"}, "cpu_limit"),
    ({"memory_request": "1 GB"}, "memory_request"),
    ({"deadline_s": 0}, "deadline_s"),
    ({"run_as_user": 0}, "non-root"),
    ({"workdir": "work"}, "absolute"),
    ({"labels": {"a": "b c"}}, "label"),
])
def test_options_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        K8sSandboxOptions(**kwargs)


def test_pod_names_are_unique_dns_labels():
    names = {new_pod_name() for _ in range(100)}
    assert len(names) == 100
    assert all(len(n) <= 63 and n == n.lower() for n in names)
