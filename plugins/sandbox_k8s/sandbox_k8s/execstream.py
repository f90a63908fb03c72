"""One command through the Kubernetes exec websocket (blocking; callers use a thread).

Not exercised in this repository's tests: no Kubernetes API server with a kubelet behind it
runs here, and the emulator used by the tests (kmock) does not speak the exec subprotocol.
The pure parts (argv, status parsing, output caps) are tested in ``tests/test_commands.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sandbox_k8s.commands import CappedBuffer, exec_call_kwargs, parse_exec_status

STDOUT_CHANNEL = 1
STDERR_CHANNEL = 2
ERROR_CHANNEL = 3
STDIN_CHUNK = 256 * 1024


@dataclass
class RawExec:
    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    stream_timed_out: bool  # the client gave up waiting (the in-pod timeout should come first)
    message: str  # the error channel's message when there is no exit code
    duration_s: float


def run_exec(
    core_api: Any,
    namespace: str,
    pod: str,
    command: list[str],
    *,
    stdin: bytes | None = None,
    wall_timeout_s: float,
    max_stdout: int,
    max_stderr: int,
) -> RawExec:
    """Run ``command`` in the sandbox container and collect capped stdout/stderr and the code."""
    from kubernetes.stream import stream

    start = time.monotonic()
    kwargs = exec_call_kwargs(pod, namespace, command, stdin=stdin is not None)
    resp = stream(core_api.connect_get_namespaced_pod_exec, **kwargs)
    out, err = CappedBuffer(max_stdout), CappedBuffer(max_stderr)
    status = b""
    timed_out = False
    try:
        if stdin is not None:
            for i in range(0, len(stdin), STDIN_CHUNK):
                resp.write_stdin(stdin[i : i + STDIN_CHUNK])
            close_channel = getattr(resp, "close_channel", None)  # kubernetes >= 36
            if close_channel is not None:
                close_channel(0)  # v5 protocol only; a no-op on v4 (head -c ends the read)
        deadline = start + wall_timeout_s
        while resp.is_open():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            resp.update(timeout=min(remaining, 1.0))
            out.write(resp.read_channel(STDOUT_CHANNEL))
            err.write(resp.read_channel(STDERR_CHANNEL))
            status += _as_bytes(resp.read_channel(ERROR_CHANNEL))
        out.write(resp.read_channel(STDOUT_CHANNEL))
        err.write(resp.read_channel(STDERR_CHANNEL))
        status += _as_bytes(resp.read_channel(ERROR_CHANNEL))
    finally:
        resp.close()
    if timed_out:
        code, message = -1, f"no exit status within {wall_timeout_s:.0f}s"
    else:
        code, message = parse_exec_status(status)
    return RawExec(
        exit_code=code,
        stdout=out.getvalue(),
        stderr=err.getvalue(),
        truncated=out.truncated or err.truncated,
        stream_timed_out=timed_out,
        message=message,
        duration_s=time.monotonic() - start,
    )


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data
