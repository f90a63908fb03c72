"""``K8sSandbox``: the async :class:`~slime_hookspecs.protocols.Sandbox` on one Kubernetes Pod.

Lifecycle: :meth:`K8sSandbox.start` (or ``async with``, or the first ``exec``) makes sure the
run's deny-egress NetworkPolicy exists, creates the Pod and waits until it is Running;
:meth:`K8sSandbox.close` deletes the Pod with grace period 0 and may be called any number of
times. Every blocking call of the official client runs in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from slime_hookspecs.protocols import ExecResult

from sandbox_k8s import commands
from sandbox_k8s.client import api_client as _shared_api_client
from sandbox_k8s.manifests import (
    CONTAINER_NAME,
    K8sSandboxOptions,
    build_network_policy,
    build_pod_manifest,
    new_pod_name,
)

# Container states after which waiting longer does not help.
FATAL_WAITING_REASONS = frozenset({
    "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff",
    "RunContainerError", "PreCreateHookError", "PostStartHookError",
})
# Seconds the client waits beyond the in-pod timeout before giving up on the stream.
STREAM_GRACE_S = 15.0

_policies_done: set[tuple[str, str, str]] = set()
_policies_lock = threading.Lock()


class SandboxStartError(RuntimeError):
    """The pod did not reach Running; the message carries its phase and reasons."""


class K8sSandbox:
    """One sandbox = one Pod. ``K8sSandbox(namespace="tools", image="python:3.12-slim")``.

    Options are the fields of :class:`~sandbox_k8s.manifests.K8sSandboxOptions`.
    ``api_client`` (a ``kubernetes.client.ApiClient``) overrides the kubeconfig lookup.
    """

    def __init__(self, options: K8sSandboxOptions | None = None, *, api_client: Any = None,
                 **kwargs: Any) -> None:
        if options is not None and kwargs:
            raise TypeError("pass either options or keyword options, not both")
        self.options = options or K8sSandboxOptions.from_mapping(kwargs)
        self.pod_name = new_pod_name()
        self._api_client = api_client
        self._core: Any = None
        self._started = False
        self._created = False  # set in the worker thread: a cancelled start still gets cleaned
        self._closed = False
        self._start_lock = asyncio.Lock()

    # ------------------------------------------------------------------ clients
    def _core_api(self) -> Any:
        if self._core is None:
            from kubernetes import client

            if self._api_client is None:
                self._api_client = _shared_api_client(self.options.kubeconfig,
                                                      self.options.context)
            self._core = client.CoreV1Api(self._api_client)
        return self._core

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> K8sSandbox:
        """Create the pod and wait for Running; a no-op once started."""
        async with self._start_lock:
            if self._closed:
                raise RuntimeError(f"sandbox {self.pod_name} is closed")
            if not self._started:
                await asyncio.to_thread(self._start_blocking)
                self._started = True
        return self

    def _start_blocking(self) -> None:
        opts = self.options
        core = self._core_api()
        if opts.deny_egress:
            ensure_network_policy(self._api_client, opts.namespace, opts.run_id)
        core.create_namespaced_pod(opts.namespace, build_pod_manifest(self.pod_name, opts))
        self._created = True
        try:
            self._wait_running_blocking()
        except BaseException:
            self._delete_blocking()
            self._created = False
            raise

    def _wait_running_blocking(self) -> None:
        opts = self.options
        deadline = time.monotonic() + opts.startup_timeout_s
        last = "no status yet"
        while True:
            pod = self._core_api().read_namespaced_pod(self.pod_name, opts.namespace)
            phase, ready, fatal, last = pod_state(pod)
            if phase == "Running" and ready:
                return
            if fatal or phase in ("Failed", "Succeeded"):
                raise SandboxStartError(
                    f"sandbox pod {opts.namespace}/{self.pod_name} (image {opts.image}) "
                    f"failed to start: {last}"
                )
            if time.monotonic() >= deadline:
                raise SandboxStartError(
                    f"sandbox pod {opts.namespace}/{self.pod_name} (image {opts.image}) not "
                    f"Running after {opts.startup_timeout_s:g}s: {last}"
                )
            time.sleep(opts.poll_interval_s)

    async def close(self) -> None:
        """Delete the pod (grace period 0); idempotent, and safe before :meth:`start`."""
        if self._closed:
            return
        self._closed = True
        if self._created:
            await asyncio.to_thread(self._delete_blocking)

    def _delete_blocking(self) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            self._core_api().delete_namespaced_pod(
                self.pod_name, self.options.namespace,
                body=client.V1DeleteOptions(grace_period_seconds=0),
                grace_period_seconds=0,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def __aenter__(self) -> K8sSandbox:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --------------------------------------------------------------------- exec
    async def exec(self, cmd: str | list[str], timeout: float = 30.0,
                   env: dict[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` (a string goes through ``sh -c``) with a hard in-pod timeout."""
        argv = commands.build_exec_command(cmd, timeout, env)
        raw = await self._run(argv, wall_timeout_s=timeout + STREAM_GRACE_S,
                              max_stdout=self.options.max_output_bytes)
        timed_out = raw.stream_timed_out or (
            raw.exit_code == commands.TIMEOUT_EXIT_CODE and raw.duration_s >= timeout * 0.9
        )
        stderr = raw.stderr.decode("utf-8", "replace")
        if raw.exit_code == -1 and raw.message:
            stderr = (stderr + ("\n" if stderr else "") + raw.message)
        return ExecResult(
            exit_code=raw.exit_code, stdout=raw.stdout.decode("utf-8", "replace"),
            stderr=stderr, timed_out=timed_out, truncated=raw.truncated,
            duration_s=raw.duration_s,
        )

    async def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` at ``path`` (relative to ``workdir``), creating parent directories."""
        full = commands.resolve_path(path, self.options.workdir)
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        archive = commands.make_tar(full, payload)
        raw = await self._run(commands.build_write_command(len(archive)), stdin=archive,
                              wall_timeout_s=60.0 + len(archive) / 1e6,
                              max_stdout=self.options.max_output_bytes)
        if raw.exit_code != 0:
            raise OSError(f"write_file {full} in pod {self.pod_name} failed "
                          f"(exit {raw.exit_code}): {raw.stderr.decode(errors='replace')}"
                          f"{raw.message}")

    async def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` (relative to ``workdir``); at most ``max_file_bytes``."""
        full = commands.resolve_path(path, self.options.workdir)
        raw = await self._run(commands.build_read_command(full), wall_timeout_s=120.0,
                              max_stdout=self.options.max_file_bytes + 64 * 1024)
        if raw.exit_code == 2:
            raise FileNotFoundError(full)
        if raw.exit_code == 3:
            raise IsADirectoryError(full)
        if raw.exit_code != 0:
            raise OSError(f"read_file {full} in pod {self.pod_name} failed "
                          f"(exit {raw.exit_code}): {raw.stderr.decode(errors='replace')}"
                          f"{raw.message}")
        if raw.truncated:
            raise OSError(f"read_file {full}: larger than max_file_bytes="
                          f"{self.options.max_file_bytes}")
        return commands.extract_tar_member(raw.stdout, full)

    async def _run(self, argv: list[str], *, wall_timeout_s: float, max_stdout: int,
                   stdin: bytes | None = None) -> Any:
        from sandbox_k8s.execstream import run_exec

        await self.start()
        return await asyncio.to_thread(
            run_exec, self._core_api(), self.options.namespace, self.pod_name, argv,
            stdin=stdin, wall_timeout_s=wall_timeout_s, max_stdout=max_stdout,
            max_stderr=self.options.max_output_bytes,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._started else "new"
        return f"K8sSandbox({self.options.namespace}/{self.pod_name}, {state})"


def pod_state(pod: Any) -> tuple[str, bool, bool, str]:
    """``(phase, container running, fatal, description)`` of a ``V1Pod``."""
    status = pod.status
    phase = (status.phase if status else None) or "Pending"
    parts = [f"phase {phase}"]
    if status and status.reason:
        parts.append(f"reason {status.reason}: {status.message or ''}".rstrip(": "))
    running, fatal = False, False
    for cs in (status.container_statuses or []) if status else []:
        if cs.name != CONTAINER_NAME or cs.state is None:
            continue
        if cs.state.running is not None:
            running = True
        if cs.state.waiting is not None:
            reason = cs.state.waiting.reason or "Waiting"
            fatal = fatal or reason in FATAL_WAITING_REASONS
            parts.append(f"container {reason}: {cs.state.waiting.message or ''}".rstrip(": "))
        if cs.state.terminated is not None:
            term = cs.state.terminated
            parts.append(f"container terminated ({term.reason}, exit {term.exit_code})")
    for cond in (status.conditions or []) if status else []:
        if cond.status != "True" and (cond.reason or cond.message):
            parts.append(f"{cond.type}={cond.status} {cond.reason or ''}: "
                         f"{cond.message or ''}".rstrip(": "))
    return phase, running, fatal, "; ".join(parts)


def ensure_network_policy(api_client: Any, namespace: str, run_id: str) -> bool:
    """Create the run's deny-egress NetworkPolicy once per (cluster, namespace, run).

    Returns True when this call created it; an existing one (409) counts as done.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    key = (str(getattr(api_client.configuration, "host", "")), namespace, run_id)
    with _policies_lock:
        if key in _policies_done:
            return False
        created = True
        try:
            client.NetworkingV1Api(api_client).create_namespaced_network_policy(
                namespace, build_network_policy(namespace, run_id))
        except ApiException as exc:
            if exc.status != 409:
                raise
            created = False
        _policies_done.add(key)
        return created
