"""``local``: the built-in sandbox, one bubblewrap jail per command.

Each :meth:`LocalSandbox.exec` starts ``bwrap`` (see :mod:`slime_agent.sandbox.jail` for what
the jail contains and how limits and the sandbox user are set up). The work directory
persists between commands of one sandbox; ``/tmp`` does not.

Process-tree kill: bwrap is started in its own session, reports the host pid of the jail's
init (its pid-namespace pid 1) on ``--info-fd``; on timeout, cancellation or :meth:`close`
that init gets SIGKILL (through a pidfd, so a recycled pid is never hit), which makes the
kernel kill every process of the namespace, daemonized or not, and bwrap's session gets
SIGKILL too. ``--die-with-parent`` covers the host process dying instead.

Reaping: bwrap exits without waiting for the jail's init, which would stay a zombie of the
host's PID 1 (and in the sandbox's ``pids`` cgroup) where PID 1 does not reap; this process
becomes a child subreaper and reaps each init after its command (:mod:`.reaper`).

Totals per sandbox: all commands of one sandbox share one cgroup (``memory_mb`` and
``max_processes`` over everything running in it, :mod:`slime_agent.sandbox.cgroup`) and, as
root, a ``disk_mb`` tmpfs as the work directory (:mod:`slime_agent.sandbox.workfs`). Where the
host does not allow them the per-process rlimits remain; :attr:`LocalSandbox.enforcement`
says which limit is enforced how, and ``require_total_limits=True`` refuses to start without.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
import weakref
from typing import Any

from slime_hookspecs.protocols import ExecResult

from slime_agent.sandbox import cgroup, jail, workdir, workfs
from slime_agent.sandbox.nouserns import userns_filter
from slime_agent.sandbox.process import CappedOutput, Running, read_json, write_id_map
from slime_agent.sandbox.reaper import become_subreaper, reap_jail_init

MISSING_BWRAP = (
    "bwrap not found on PATH; install it with `apt-get install bubblewrap` (Debian/Ubuntu) "
    "or your distribution's bubblewrap package"
)
_BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
_SETUP_TIMEOUT_S = 30.0
_DRAIN_AFTER_KILL_S = 5.0
_BWRAP_PROCESSES = 2  # bwrap's own processes of each running command, inside the cgroup


class SandboxError(RuntimeError):
    """The jail itself could not be set up (not a failure of the command run in it)."""


class _HostResources:
    """What a sandbox holds on the host besides files: its cgroup and its /work mount."""

    def __init__(self) -> None:
        self.cgroup: cgroup.SandboxCgroup | None = None
        self.mounted: str | None = None

    def release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()  # kills anything left in it
            self.cgroup = None
        if self.mounted is not None:
            workfs.unmount(self.mounted)
            self.mounted = None


def _cleanup(state_dir: str, host: _HostResources) -> None:
    """Finalizer: host resources first (a mounted /work is inside ``state_dir``), then files."""
    host.release()
    workdir.remove_tree(state_dir)


def _filter_fd(program: bytes | None) -> int | None:
    """A readable fd holding ``program`` (bwrap reads it to its end), or ``None``."""
    if program is None:
        return None
    r, w = os.pipe()
    try:
        os.write(w, program)  # far below a pipe's capacity
    finally:
        os.close(w)
    return r


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"local sandbox option {name} must be a positive integer, got {value!r}")
    return value


class LocalSandbox:
    """A bubblewrap sandbox on this machine; see the module docstring.

    :param work_dir: host directory shown as ``/work``; default a fresh temporary directory,
        removed by :meth:`close` (a given directory is kept; when the host process is root it
        is handed to ``host_uid`` so the sandbox can write it).
    :param memory_mb: address-space limit of every process (``RLIMIT_AS``); also the size of
        the ``/tmp`` tmpfs.
    :param cpu_seconds: CPU-time limit of every process (``RLIMIT_CPU``; SIGXCPU, then SIGKILL).
    :param max_processes: processes and threads the command may have at once (``RLIMIT_NPROC``).
    :param output_cap_bytes: bytes kept of stdout and of stderr each; the rest is discarded.
    :param allow_network: share the host's network namespace instead of an empty one.
    :param python: interpreter exposed in the jail (read-only, first on ``PATH``); default
        this process's interpreter with its installation tree(s).
    :param file_size_mb: largest file the command may write (``RLIMIT_FSIZE``).
    :param host_uid: unprivileged host uid (and gid) the command runs as when this process
        is root; ignored otherwise (the command then runs as this process's uid).
    :param disk_mb: total size of the files in the temporary ``/work`` (a tmpfs; root only).
    :param require_total_limits: raise :class:`SandboxError` unless memory, processes and disk
        are enforced over the whole sandbox (not only per process).

    ``memory_mb`` and ``max_processes`` also bound the sum over every process of every running
    command of this sandbox where a cgroup can be made (bwrap's own two processes per command
    are added to the process budget).
    """

    def __init__(
        self,
        *,
        work_dir: str | os.PathLike[str] | None = None,
        memory_mb: int = 512,
        cpu_seconds: int = 10,
        max_processes: int = 64,
        output_cap_bytes: int = 64 * 1024,
        allow_network: bool = False,
        python: str | None = None,
        file_size_mb: int = 128,
        host_uid: int = 65534,
        disk_mb: int = 512,
        require_total_limits: bool = False,
    ) -> None:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxError(MISSING_BWRAP)
        self._bwrap = bwrap
        self.limits = jail.Limits(
            memory_mb=_positive("memory_mb", memory_mb),
            cpu_seconds=_positive("cpu_seconds", cpu_seconds),
            max_processes=_positive("max_processes", max_processes),
            file_size_mb=_positive("file_size_mb", file_size_mb),
        )
        self.output_cap_bytes = _positive("output_cap_bytes", output_cap_bytes)
        self.allow_network = bool(allow_network)
        self._python = jail.python_mounts(python)
        # before any command: the jails' inits must be reparented here, not to PID 1
        self.reaping = become_subreaper() or "each command's jail init is reaped"
        self._owner = (host_uid, host_uid) if os.geteuid() == 0 else None
        self._running: set[Running] = set()
        self._commands = 0  # started and not finished (the cgroup's process budget follows it)
        self._closed = False
        self.disk_mb = _positive("disk_mb", disk_mb)
        self._seccomp = userns_filter() if self._owner is not None else None
        self.enforcement: dict[str, str] = {}
        self._state_dir = tempfile.mkdtemp(prefix="slime-sandbox-")
        self._host = _HostResources()
        self._finalizer = weakref.finalize(self, _cleanup, self._state_dir, self._host)
        try:
            self._etc_dir = os.path.join(self._state_dir, "etc")
            jail.write_identity_files(self._etc_dir)
            if work_dir is None:
                self.work_dir = os.path.join(self._state_dir, "work")
                os.mkdir(self.work_dir, 0o755)
                why = workfs.mount_tmpfs(self.work_dir, self.disk_mb << 20, self._owner)
                if why is None:
                    self._host.mounted = self.work_dir
            else:
                self.work_dir = os.path.realpath(os.fspath(work_dir))
                os.makedirs(self.work_dir, exist_ok=True)
                why = "a given work_dir is the caller's; its filesystem must cap it"
            if self._owner is not None:
                workdir.chown_tree(self.work_dir, self._owner)
            self._set_up_totals(why, require_total_limits)
        except BaseException:
            self._finalizer()
            raise

    def _set_up_totals(self, disk_why: str | None, required: bool) -> None:
        """Make the sandbox's cgroup and fill :attr:`enforcement`."""
        support = cgroup.detect()
        cg_why = support if isinstance(support, str) else None
        if isinstance(support, cgroup.Support):
            try:
                self._host.cgroup = cgroup.SandboxCgroup(
                    support, self.limits.memory_mb << 20, self.limits.max_processes
                )
            except OSError as exc:
                cg_why = f"cannot create a cgroup: {exc}"
        if self._host.cgroup is not None:
            where = f"cgroup v{self._host.cgroup.version}"
            self.enforcement["memory"] = f"total {self.limits.memory_mb} MiB ({where})"
            self.enforcement["processes"] = f"total {self.limits.max_processes} ({where})"
        else:
            self.enforcement["memory"] = f"per process only (RLIMIT_AS): {cg_why}"
            self.enforcement["processes"] = f"per command only (RLIMIT_NPROC): {cg_why}"
        if disk_why is None:
            self.enforcement["disk"] = f"total {self.disk_mb} MiB (tmpfs /work)"
        else:
            self.enforcement["disk"] = f"per file only (RLIMIT_FSIZE): {disk_why}"
        if self._owner is None:
            self.enforcement["user_namespaces"] = "refused (bwrap --disable-userns)"
        elif self._seccomp is not None:
            self.enforcement["user_namespaces"] = "refused (seccomp filter)"
        else:
            self.enforcement["user_namespaces"] = (
                "allowed: no seccomp filter for this architecture and bwrap rejects "
                "--disable-userns with --userns-block-fd")
        missing = [f"{k}: {v}" for k, v in self.enforcement.items()
                   if k != "user_namespaces" and not v.startswith("total")]
        if required and missing:
            raise SandboxError("require_total_limits: not enforced here: " + "; ".join(missing))

    # -- commands -----------------------------------------------------------------------

    async def exec(
        self, cmd: str | list[str], timeout: float | None = 30.0, env: dict[str, str] | None = None
    ) -> ExecResult:
        """Run ``cmd`` (a shell string for ``/bin/sh -c``, or an argv list) in a fresh jail.

        ``env`` is added to a clean environment of ``PATH``, ``HOME=/work`` and ``LANG``.
        Waits at most ``timeout`` seconds (``None``: no wall limit), then kills the whole
        process tree and returns with ``timed_out=True``. ``exit_code`` is 128 + N for a
        command killed by signal N (137 after a timeout, 152 after the CPU limit).
        """
        if self._closed:
            raise SandboxError("the sandbox is closed")
        command = self._command(cmd)
        path = f"{self._python.bin_dir}:{jail.PYTHON_BIN}:{_BASE_PATH}"
        environ = {"PATH": path, "HOME": jail.WORK, "LANG": "C.UTF-8"}
        environ.update({str(k): str(v) for k, v in (env or {}).items()})
        started = time.monotonic()
        deadline = None if timeout is None else started + max(float(timeout), 0.0)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe() if self._owner is not None else (None, None)
        seccomp_r = _filter_fd(self._seccomp)
        pass_fds = tuple(fd for fd in (info_w, block_r, seccomp_r) if fd is not None)
        run: Running | None = None
        try:
            argv = jail.bwrap_argv(
                self._bwrap, command, limits=self.limits, python=self._python,
                work_dir=self.work_dir, etc_dir=self._etc_dir, info_fd=info_w,
                userns_block_fd=block_r, allow_network=self.allow_network,
                seccomp_fd=seccomp_r,
            )
            self._commands += 1
            self._budget()
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=environ, pass_fds=pass_fds,
                start_new_session=True,
                # into the sandbox's cgroup before bwrap runs: nothing it starts is outside
                preexec_fn=self._host.cgroup.join if self._host.cgroup is not None else None,
            )
        except BaseException:
            for fd in (info_r, block_w):
                if fd is not None:
                    os.close(fd)
            self._commands -= 1
            self._budget()
            raise
        finally:
            for fd in (info_w, block_r, seccomp_r):
                if fd is not None:
                    os.close(fd)
        run = Running(proc)
        self._running.add(run)
        out, err = CappedOutput(self.output_cap_bytes), CappedOutput(self.output_cap_bytes)
        assert proc.stdout is not None and proc.stderr is not None
        readers = [asyncio.create_task(out.drain(proc.stdout)),
                   asyncio.create_task(err.drain(proc.stderr))]
        timed_out = False
        try:
            try:
                if not await self._start(run, info_r, block_w, deadline):
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.gather(*readers), _DRAIN_AFTER_KILL_S)
                    raise SandboxError(
                        f"bwrap could not set up the sandbox (exit code {proc.returncode}): "
                        f"{err.text().strip() or 'no message'}"
                    )
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                await asyncio.wait_for(proc.wait(), remaining)
            except asyncio.TimeoutError:  # during setup or while the command ran
                timed_out = True
                run.kill()
                await proc.wait()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*readers), _DRAIN_AFTER_KILL_S)
        finally:
            await self._finish(run, readers)
        code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return ExecResult(
            exit_code=128 - code if code < 0 else code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
            duration_s=time.monotonic() - started,
        )

    def _command(self, cmd: str | list[str]) -> list[str]:
        if isinstance(cmd, str):
            return ["/bin/sh", "-c", cmd]
        if (isinstance(cmd, (list, tuple)) and cmd
                and all(isinstance(a, (str, os.PathLike)) for a in cmd)):
            return [os.fspath(a) for a in cmd]
        raise TypeError(f"cmd must be a shell string or a non-empty list of strings, got {cmd!r}")

    async def _start(self, run: Running, info_r: int, block_w: int | None,
                     deadline: float | None) -> bool:
        """Learn the jail's init pid from bwrap; as root, map the sandbox user and release it.

        False when bwrap exited without creating the jail (its reason is on stderr).
        """
        try:
            budget = _SETUP_TIMEOUT_S if deadline is None else max(deadline - time.monotonic(), 0.1)
            info = await asyncio.wait_for(read_json(info_r), min(budget, _SETUP_TIMEOUT_S))
            if info is None:
                await run.proc.wait()
                return False
            run.init_pid = int(info["child-pid"])
            with contextlib.suppress(AttributeError, OSError):
                run.pidfd = os.pidfd_open(run.init_pid)
            if block_w is not None:
                assert self._owner is not None
                uid, gid = self._owner
                try:
                    write_id_map(run.init_pid, "gid_map", jail.SANDBOX_GID, gid)
                    write_id_map(run.init_pid, "uid_map", jail.SANDBOX_UID, uid)
                except OSError as exc:
                    raise SandboxError(
                        f"could not map the sandbox user to host uid {uid}: {exc}"
                    ) from exc
                os.write(block_w, b"1")
            return True
        finally:
            for fd in (info_r, block_w):
                if fd is not None:
                    os.close(fd)

    async def _finish(self, run: Running, readers: list[asyncio.Task[None]]) -> None:
        """Make sure nothing of this command survives, whatever happened (errors, cancel)."""
        if run.proc.returncode is None:
            run.kill()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(run.proc.wait(), _DRAIN_AFTER_KILL_S)
        for task in readers:
            if not task.done():
                task.cancel()
        if run.proc.returncode is not None:  # bwrap is gone: its init is this process's child
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await reap_jail_init(run.pidfd, _DRAIN_AFTER_KILL_S)
        run.release()
        self._running.discard(run)
        self._commands -= 1
        self._budget()

    def _budget(self) -> None:
        """The cgroup's process limit: ``max_processes`` plus bwrap's own per command."""
        if self._host.cgroup is not None and not self._closed:
            with contextlib.suppress(OSError):
                self._host.cgroup.set_max_processes(
                    self.limits.max_processes + _BWRAP_PROCESSES * max(self._commands, 1))

    # -- files --------------------------------------------------------------------------

    async def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``path`` (relative or under ``/work``), creating parent directories."""
        self._check_open()
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        await asyncio.to_thread(workdir.write_bytes, self.work_dir, path, raw, self._owner)

    async def read_file(self, path: str) -> bytes:
        """Contents of ``path`` (relative or under ``/work``); links are never followed."""
        self._check_open()
        return await asyncio.to_thread(workdir.read_bytes, self.work_dir, path)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")

    # -- lifetime -----------------------------------------------------------------------

    async def close(self) -> None:
        """Kill every running command and remove the temporary work directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        runs = list(self._running)
        for run in runs:
            run.kill()
        for run in runs:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(run.proc.wait(), _DRAIN_AFTER_KILL_S)
        await asyncio.to_thread(self._finalizer)



    async def __aenter__(self) -> LocalSandbox:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<LocalSandbox {self.work_dir!r} {state} {self.limits}>"
