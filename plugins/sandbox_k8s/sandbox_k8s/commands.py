"""What is sent through the exec stream and how its answers are read; no ``kubernetes`` here.

* :func:`build_exec_command` wraps the user's command with ``timeout -s KILL`` (the limit is
  enforced inside the pod, killing the whole process group) and ``env`` for extra variables.
* :func:`build_write_command` / :func:`build_read_command` move files as tar archives:
  ``head -c N | tar -x`` reads exactly the archive from stdin, so no end-of-stdin signal is
  needed (the v4 exec protocol has none).
* :func:`parse_exec_status` reads the exit code from the exec error channel (channel 3),
  a ``metav1.Status`` document.
"""

from __future__ import annotations

import io
import json
import math
import posixpath
import re
import tarfile
from typing import Any

# ``timeout -s KILL`` signals the process group with SIGKILL, itself included: 128 + 9.
TIMEOUT_EXIT_CODE = 137
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def resolve_path(path: str, workdir: str) -> str:
    """Absolute, normalised path in the pod; relative paths are under ``workdir``."""
    if not path:
        raise ValueError("sandbox path is empty")
    full = posixpath.normpath(posixpath.join(workdir, path))
    if full in ("/", "//"):
        raise ValueError(f"sandbox path {path!r} resolves to '/'")
    return full


def build_exec_command(
    cmd: str | list[str], timeout: float, env: dict[str, str] | None = None
) -> list[str]:
    """argv run in the pod: ``timeout -s KILL <s> [env K=V ...] <cmd>``.

    A string runs through ``sh -c``; a list runs as is. ``timeout`` is rounded up to whole
    seconds (busybox ``timeout`` takes integers only) and is at least 1.
    """
    if isinstance(cmd, str):
        argv = ["sh", "-c", cmd]
    else:
        argv = [str(a) for a in cmd]
        if not argv:
            raise ValueError("empty command")
    seconds = max(1, math.ceil(float(timeout)))
    prefix = ["timeout", "-s", "KILL", str(seconds)]
    if env:
        assigns = []
        for key, value in env.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f"invalid environment variable name {key!r}")
            assigns.append(f"{key}={value}")
        prefix += ["env", *assigns]
    return prefix + argv


def exec_call_kwargs(pod: str, namespace: str, command: list[str], stdin: bool) -> dict[str, Any]:
    """Keyword arguments of ``stream(connect_get_namespaced_pod_exec, **kwargs)``."""
    from sandbox_k8s.manifests import CONTAINER_NAME

    return {
        "name": pod,
        "namespace": namespace,
        "command": command,
        "container": CONTAINER_NAME,
        "stdin": stdin,
        "stdout": True,
        "stderr": True,
        "tty": False,
        "binary": True,
        "_preload_content": False,
    }


def make_tar(path: str, data: bytes, mode: int = 0o644) -> bytes:
    """A tar archive holding ``data`` at absolute ``path`` (stored without the leading /)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name=path.lstrip("/"))
        info.size = len(data)
        info.mode = mode
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_write_command(archive_size: int) -> list[str]:
    """Extract exactly ``archive_size`` bytes of tar from stdin at ``/`` (parents created)."""
    script = 'head -c "$0" | tar -x -o -f - -C /'
    return ["sh", "-c", script, str(int(archive_size))]


def build_read_command(path: str) -> list[str]:
    """Write a tar of the single file ``path`` to stdout."""
    directory, base = posixpath.split(path)
    script = 'test -e "$1/$2" || { echo "no such file: $1/$2" >&2; exit 2; }; ' \
             'test -d "$1/$2" && { echo "is a directory: $1/$2" >&2; exit 3; }; ' \
             'exec tar -c -f - -C "$1" "$2"'
    return ["sh", "-c", script, "sh", directory or "/", base]


def extract_tar_member(archive: bytes, path: str) -> bytes:
    """The bytes of the one regular file of ``archive`` (made by :func:`build_read_command`)."""
    base = posixpath.basename(path)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        for member in tar.getmembers():
            if member.isfile() and posixpath.basename(member.name.rstrip("/")) == base:
                fh = tar.extractfile(member)
                assert fh is not None
                return fh.read()
    raise FileNotFoundError(f"{path}: not in the archive the pod sent")


def parse_exec_status(raw: bytes | str | None) -> tuple[int, str]:
    """``(exit_code, message)`` from the error channel's ``Status`` document.

    ``Success`` is 0; ``NonZeroExitCode`` carries the code in the cause with reason
    ``ExitCode``; any other failure (the command does not exist, the container is gone) is
    ``-1`` with the server's message. Nothing on the channel (a closed stream) is ``-1`` too.
    """
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw or not raw.strip():
        return -1, "the exec stream closed without an exit status"
    try:
        status = json.loads(raw)
    except json.JSONDecodeError:
        return -1, f"unreadable exec status: {raw[:200]!r}"
    if status.get("status") == "Success":
        return 0, ""
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message")), ""
            except (TypeError, ValueError):
                break
    return -1, str(status.get("message") or status.get("reason") or raw[:200])


class CappedBuffer:
    """Keeps the first ``cap`` bytes written; remembers whether more came."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._parts: list[bytes] = []
        self._size = 0
        self.truncated = False

    def write(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        room = self.cap - self._size
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if data:
            self._parts.append(data)
            self._size += len(data)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def text(self) -> str:
        return self.getvalue().decode("utf-8", "replace")
