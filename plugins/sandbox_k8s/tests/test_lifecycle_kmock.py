"""Pod lifecycle against the kmock Kubernetes API emulator (real HTTP on 127.0.0.1).

kmock has no scheduler or kubelet: :class:`FakeKubelet` plays that part through the API
(``patch_namespaced_pod_status``), the way a kubelet reports a pod's status. What is tested
is the sandbox's own traffic: the objects it creates, the requests it sends, how it reads
the status it gets back, and what it deletes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any, Callable

import pytest

pytest.importorskip("kubernetes")
pytest.importorskip("kmock")

from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from sandbox_k8s import sandbox as sandbox_mod  # noqa: E402
from sandbox_k8s import sweep  # noqa: E402
from sandbox_k8s.manifests import K8sSandboxOptions, build_pod_manifest  # noqa: E402
from sandbox_k8s.sandbox import K8sSandbox, SandboxStartError  # noqa: E402

NS = "sbx"

RUNNING = {"phase": "Running", "containerStatuses": [
    {"name": "sandbox", "ready": True, "restartCount": 0, "image": "python:3.12-slim",
     "imageID": "", "state": {"running": {"startedAt": "2026-11-01T00:00:00Z"}}}]}
IMAGE_PULL_BACKOFF = {"phase": "Pending", "containerStatuses": [
    {"name": "sandbox", "ready": False, "restartCount": 0, "image": "nope:latest",
     "imageID": "", "state": {"waiting": {
         "reason": "ImagePullBackOff",
         "message": 'Back-off pulling image "nope:latest"'}}}]}
UNSCHEDULABLE = {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/3 nodes are available: 3 Insufficient cpu."}]}
DEADLINE = {"phase": "Failed", "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline"}


class FakeKubelet:
    """Patches every new pod of the namespace with ``status`` through the API."""

    def __init__(self, api_client: Any, status: dict[str, Any] | None) -> None:
        self.core = client.CoreV1Api(api_client)
        self.status = status
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pods = self.core.list_namespaced_pod(NS).items
            except ApiException:  # the resource has no objects yet
                pods = []
            for pod in pods:
                name = pod.metadata.name
                if name not in self.seen and self.status is not None:
                    self.core.patch_namespaced_pod_status(name, NS, {"status": self.status})
                self.seen.add(name)
            self._stop.wait(0.02)

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture(autouse=True)
def _fresh_policy_cache():
    sandbox_mod._policies_done.clear()
    yield
    sandbox_mod._policies_done.clear()


def make(cluster, **kw) -> K8sSandbox:
    kw.setdefault("run_id", "run-a")
    return K8sSandbox(api_client=cluster.api_client(), namespace=NS, poll_interval_s=0.02,
                      startup_timeout_s=10, **kw)


def count(cluster, predicate: Callable[[Any], bool]) -> int:
    return sum(1 for r in cluster.requests() if predicate(r))


def is_(method: str, path_part: str) -> Callable[[Any], bool]:
    return lambda r: str(r.method).lower().endswith(method) and path_part in str(r.url.path)


def test_start_creates_the_pod_and_policy_and_close_deletes_it(cluster):
    core = client.CoreV1Api(cluster.api_client())
    net = client.NetworkingV1Api(cluster.api_client())

    async def scenario():
        with FakeKubelet(cluster.api_client(), RUNNING):
            async with make(cluster, cpu_limit="2", memory_limit="3Gi", deadline_s=600) as sb:
                pod = await asyncio.to_thread(core.read_namespaced_pod, sb.pod_name, NS)
                policy = await asyncio.to_thread(
                    net.read_namespaced_network_policy, "slime-deny-egress-run-a", NS)
                listed = await asyncio.to_thread(
                    core.list_namespaced_pod, NS,
                    label_selector="app.kubernetes.io/managed-by=slime,slime.run-id=run-a")
                return sb, pod, policy, listed

    sb, pod, policy, listed = asyncio.run(scenario())
    assert pod.status.phase == "Running"
    assert pod.metadata.labels == {"app.kubernetes.io/managed-by": "slime",
                                   "slime.run-id": "run-a"}
    spec = pod.spec
    assert spec.automount_service_account_token is False
    assert spec.enable_service_links is False
    assert spec.active_deadline_seconds == 600
    assert spec.restart_policy == "Never"
    assert spec.security_context.run_as_non_root is True
    assert spec.security_context.run_as_user == 65534
    (c,) = spec.containers
    assert c.image == "python:3.12-slim" and c.command == ["sleep", "600"]
    assert c.resources.limits["cpu"] == "2" and c.resources.limits["memory"] == "3Gi"
    assert c.resources.requests == {"cpu": "100m", "memory": "256Mi"}
    assert c.security_context.allow_privilege_escalation is False
    assert policy.spec.pod_selector.match_labels == pod.metadata.labels
    assert policy.spec.policy_types == ["Egress"] and not policy.spec.egress
    assert [p.metadata.name for p in listed.items] == [sb.pod_name]
    # closed: the pod is gone, deleted with grace period 0
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod(sb.pod_name, NS)
    assert err.value.status == 404
    (delete,) = [r for r in cluster.requests() if is_("delete", sb.pod_name)(r)]
    assert delete.params.get("gracePeriodSeconds") == "0"
    assert delete.data.get("gracePeriodSeconds") == 0


def test_close_is_idempotent_and_a_noop_before_start(cluster):
    async def scenario():
        never = make(cluster)
        await never.close()
        await never.close()
        with FakeKubelet(cluster.api_client(), RUNNING):
            sb = await make(cluster).start()
            await sb.close()
            await sb.close()
        with pytest.raises(RuntimeError, match="closed"):
            await sb.start()
        return never, sb

    never, sb = asyncio.run(scenario())
    assert count(cluster, lambda r: never.pod_name in str(r.url) or
                 (r.data or {}).get("metadata", {}).get("name") == never.pod_name) == 0
    assert count(cluster, is_("delete", sb.pod_name)) == 1


def test_network_policy_is_created_once_per_namespace_and_run(cluster):
    async def scenario():
        with FakeKubelet(cluster.api_client(), RUNNING):
            boxes = [make(cluster) for _ in range(3)] + [make(cluster, run_id="run-b")]
            await asyncio.gather(*(b.start() for b in boxes))
            await asyncio.gather(*(b.close() for b in boxes))

    asyncio.run(scenario())
    posts = [r for r in cluster.requests() if is_("post", "/networkpolicies")(r)]
    assert sorted(r.data["metadata"]["name"] for r in posts) == [
        "slime-deny-egress-run-a", "slime-deny-egress-run-b"]
    assert count(cluster, is_("post", "/pods")) == 4


def test_existing_network_policy_is_accepted(cluster):
    sandbox_mod.ensure_network_policy(cluster.api_client(), NS, "run-a")
    sandbox_mod._policies_done.clear()  # another process: it will get 409 Conflict
    assert sandbox_mod.ensure_network_policy(cluster.api_client(), NS, "run-a") is False
    assert count(cluster, is_("post", "/networkpolicies")) == 2


def test_no_policy_when_egress_is_allowed(cluster):
    async def scenario():
        with FakeKubelet(cluster.api_client(), RUNNING):
            async with make(cluster, deny_egress=False):
                pass

    asyncio.run(scenario())
    assert count(cluster, lambda r: "networkpolicies" in str(r.url)) == 0


@pytest.mark.parametrize("status,expected", [
    (IMAGE_PULL_BACKOFF, r"failed to start: phase Pending; container ImagePullBackOff: "
                         r"Back-off pulling image \"nope:latest\""),
    (DEADLINE, r"failed to start: phase Failed; reason DeadlineExceeded"),
])
def test_start_failure_names_the_reason_and_removes_the_pod(cluster, status, expected):
    async def scenario():
        with FakeKubelet(cluster.api_client(), status):
            sb = make(cluster, image="nope:latest")
            with pytest.raises(SandboxStartError, match=expected):
                await sb.start()
            await sb.close()
            return sb

    sb = asyncio.run(scenario())
    assert count(cluster, is_("delete", sb.pod_name)) == 1
    with pytest.raises(ApiException):
        client.CoreV1Api(cluster.api_client()).read_namespaced_pod(sb.pod_name, NS)


@pytest.mark.parametrize("status,expected", [
    (UNSCHEDULABLE, r"not Running after 5s: phase Pending; PodScheduled=False "
                    r"Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."),
    (None, r"not Running after 0.3s: phase Pending"),
])
def test_start_timeout_names_the_state(cluster, status, expected):
    # with a status to report, the timeout must outlast the fake kubelet's patch (a poll every
    # 20 ms, but a loaded 2-core CI box once took longer than 0.3 s): the start waits for the
    # whole timeout either way, so 5 s is what the case costs
    async def scenario():
        with FakeKubelet(cluster.api_client(), status):
            sb = make(cluster)
            sb.options.startup_timeout_s = 0.3 if status is None else 5.0
            with pytest.raises(SandboxStartError, match=expected):
                await sb.start()
            return sb

    sb = asyncio.run(scenario())
    assert count(cluster, is_("delete", sb.pod_name)) == 1


# --------------------------------------------------------------------------- sweep
def _seed(cluster) -> dict[str, str]:
    """Pods of two runs (one old, one new each), a foreign pod, and run-a's policy."""
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    now = dt.datetime.now(dt.timezone.utc)
    names = {}
    for run in ("run-a", "run-b"):
        for age in ("old", "new"):
            name = f"slime-sbx-{run}-{age}"
            core.create_namespaced_pod(NS, build_pod_manifest(name, K8sSandboxOptions(
                namespace=NS, run_id=run)))
            created = now - dt.timedelta(hours=3 if age == "old" else 0, seconds=5)
            # what the API server would have set at creation (kmock sets nothing)
            core.patch_namespaced_pod(name, NS, {"metadata": {
                "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")}})
            names[f"{run}-{age}"] = name
    core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "someone-elses", "labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "web", "image": "nginx"}]}})
    sandbox_mod.ensure_network_policy(api, NS, "run-a")
    return names


def _pods(cluster) -> set[str]:
    return {p.metadata.name for p in client.CoreV1Api(cluster.api_client())
            .list_namespaced_pod(NS).items}


def test_sweep_by_run_id(cluster):
    names = _seed(cluster)
    deleted = sweep(NS, run_id="run-a", api_client=cluster.api_client())
    assert sorted(deleted) == sorted([names["run-a-old"], names["run-a-new"]])
    assert _pods(cluster) == {names["run-b-old"], names["run-b-new"], "someone-elses"}
    (listing,) = [r for r in cluster.requests()
                  if is_("get", "/pods")(r) and "labelSelector" in r.params]
    assert listing.params["labelSelector"] == \
        "app.kubernetes.io/managed-by=slime,slime.run-id=run-a"
    # the run is over: its deny-egress policy goes too
    with pytest.raises(ApiException) as err:
        client.NetworkingV1Api(cluster.api_client()).read_namespaced_network_policy(
            "slime-deny-egress-run-a", NS)
    assert err.value.status == 404


def test_sweep_older_than_keeps_young_pods_and_policies(cluster):
    names = _seed(cluster)
    deleted = sweep(NS, older_than_s=3600, api_client=cluster.api_client())
    assert sorted(deleted) == sorted([names["run-a-old"], names["run-b-old"]])
    assert _pods(cluster) == {names["run-a-new"], names["run-b-new"], "someone-elses"}
    client.NetworkingV1Api(cluster.api_client()).read_namespaced_network_policy(
        "slime-deny-egress-run-a", NS)  # still there


def test_sweep_everything_of_slime_but_never_foreign_pods(cluster):
    # kmock ignores labelSelector and lists every pod: the labels are checked again
    _seed(cluster)
    deleted = sweep(NS, api_client=cluster.api_client())
    assert len(deleted) == 4
    assert _pods(cluster) == {"someone-elses"}
    assert sweep(NS, api_client=cluster.api_client()) == []


def test_sweep_cleans_what_a_crashed_run_left(cluster):
    async def crashed_run():
        with FakeKubelet(cluster.api_client(), RUNNING):
            boxes = [make(cluster, run_id="crashed") for _ in range(2)]
            for b in boxes:
                await b.start()
            return boxes  # never closed: the process "dies" here

    boxes = asyncio.run(crashed_run())
    assert _pods(cluster) == {b.pod_name for b in boxes}
    assert sorted(sweep(NS, run_id="crashed", api_client=cluster.api_client())) == \
        sorted(b.pod_name for b in boxes)
    assert _pods(cluster) == set()
