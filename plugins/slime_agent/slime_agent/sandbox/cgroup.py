"""One cgroup per sandbox: memory and process limits over all of its commands together.

rlimits are per process (``RLIMIT_AS``) or per user namespace (``RLIMIT_NPROC``, and every
command gets a fresh one), so without a cgroup six processes of a 512 MB sandbox may hold
3 GB and each concurrent command gets its own process budget. A :class:`SandboxCgroup` is made
for each :class:`~slime_agent.sandbox.local.LocalSandbox`; bwrap is moved into it before it
executes (so every process of every command is inside), and the kernel enforces
``memory`` (OOM-kills inside the group past the limit) and ``pids`` (``fork`` fails with
``EAGAIN``) over the whole group.

Where it works:

* cgroup v2 (the unified hierarchy) when this process's cgroup -- or the directory named by
  ``SLIME_SANDBOX_CGROUP`` -- has the ``memory`` and ``pids`` controllers enabled for its
  children (``cgroup.subtree_control``) and is writable: root, or a delegated subtree
  (``systemd-run --user --scope -p Delegate=yes ...``);
* cgroup v1 when the ``memory`` and ``pids`` hierarchies are mounted and this process may
  create groups in them (root).

Otherwise :func:`detect` gives the reason and the sandbox falls back to per-process rlimits
(``LocalSandbox(require_total_limits=True)`` refuses instead). Files written to a tmpfs count
as memory of the group that wrote them (the kernel charges tmpfs pages to the writer).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass

ENV_PARENT = "SLIME_SANDBOX_CGROUP"
_counter = itertools.count()


@dataclass(frozen=True)
class Support:
    """Where sandbox cgroups can be made: ``version`` 1 or 2 and the parent directories
    (v2: one; v1: memory, pids)."""

    version: int
    parents: tuple[str, ...]


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, fstype, super options)`` of the cgroup filesystems."""
    out = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
                out.append((fields[4], rfields[0], set(rfields[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """``controller -> path`` of this process (``""`` for the v2 hierarchy)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _writable_dir(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _v2_parent(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> str:
    """The v2 parent directory, or a reason (prefixed ``"!"``) why there is none."""
    root = next((m for m, t, _ in mounts if t == "cgroup2"), None)
    if root is None:
        return "!no cgroup v2 hierarchy is mounted"
    parent = os.environ.get(ENV_PARENT) or os.path.join(root, own.get("", "/").lstrip("/"))
    available = set(_read(os.path.join(parent, "cgroup.controllers")).split())
    missing = {"memory", "pids"} - available
    if missing:
        return (f"!cgroup v2 at {parent} lacks the {', '.join(sorted(missing))} controller(s) "
                f"(available: {', '.join(sorted(available)) or 'none'})")
    if not _writable_dir(parent):
        return f"!cgroup v2 directory {parent} is not writable by uid {os.geteuid()} (not delegated)"
    enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    if not {"memory", "pids"} <= enabled:
        try:  # works for the root group and for groups without processes of their own
            with open(os.path.join(parent, "cgroup.subtree_control"), "w", encoding="ascii") as fh:
                fh.write("+memory +pids")
        except OSError as exc:
            return (f"!cannot enable memory and pids for children of {parent} ({exc.strerror}); "
                    f"point {ENV_PARENT} at a delegated cgroup without processes of its own")
    return parent


def detect() -> Support | str:
    """Where this host lets sandboxes have cgroups, or why not (a one-line reason)."""
    mounts, own = _mounts(), _own_paths()
    v2 = _v2_parent(mounts, own)
    if not v2.startswith("!"):
        return Support(2, (v2,))
    parents = []
    for controller in ("memory", "pids"):
        mount = next((m for m, t, o in mounts if t == "cgroup" and controller in o), None)
        if mount is None:
            return f"{v2[1:]}; no cgroup v1 {controller} hierarchy is mounted either"
        parent = os.path.join(mount, own.get(controller, "/").lstrip("/"))
        if not _writable_dir(parent):
            return (f"{v2[1:]}; cgroup v1 {controller} directory {parent} is not writable by "
                    f"uid {os.geteuid()}")
        parents.append(parent)
    return Support(1, tuple(parents))


class SandboxCgroup:
    """The cgroup(s) of one sandbox; :meth:`join` moves the calling process in (call it in
    the child between fork and exec), :meth:`remove` kills what is left and deletes them."""

    def __init__(self, support: Support, memory_bytes: int, max_processes: int) -> None:
        self.version = support.version
        name = f"slime-sandbox-{os.getpid()}-{next(_counter)}"
        self.dirs = [os.path.join(p, name) for p in support.parents]
        for d in self.dirs:
            os.mkdir(d, 0o755)
        try:
            if self.version == 2:
                d = self.dirs[0]
                self._write(d, "memory.max", memory_bytes)
                with contextlib.suppress(OSError):  # absent without swap accounting
                    self._write(d, "memory.swap.max", 0)
                self.pids_dir = d
            else:
                mem, pids = self.dirs
                self._write(mem, "memory.limit_in_bytes", memory_bytes)
                with contextlib.suppress(OSError):  # absent without swap accounting
                    self._write(mem, "memory.memsw.limit_in_bytes", memory_bytes)
                self.pids_dir = pids
            self.set_max_processes(max_processes)
        except BaseException:
            self.remove()
            raise
        self._procs = [os.path.join(d, "cgroup.procs") for d in self.dirs]

    @staticmethod
    def _write(d: str, name: str, value: int | str) -> None:
        with open(os.path.join(d, name), "w", encoding="ascii") as fh:
            fh.write(str(value))

    def set_max_processes(self, n: int) -> None:
        self._write(self.pids_dir, "pids.max", n)

    def join(self) -> None:
        """Move the calling process into the group (async-signal-safe enough for preexec)."""
        for path in self._procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def peak_memory_bytes(self) -> int:
        """The group's high-water mark of memory use."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = _read(os.path.join(self.dirs[0], name))
        return int(text) if text.isdigit() else 0

    def remove(self) -> None:
        """SIGKILL whatever is still inside, then delete the directories. Idempotent."""
        for d in self.dirs:
            if not os.path.isdir(d):
                continue
            if self.version == 2:
                with contextlib.suppress(OSError):
                    self._write(d, "cgroup.kill", 1)
            for _ in range(100):
                pids = _read(os.path.join(d, "cgroup.procs")).split()
                for pid in pids:
                    with contextlib.suppress(OSError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                try:
                    os.rmdir(d)
                    break
                except OSError:  # busy until the killed processes are reaped
                    time.sleep(0.02)
