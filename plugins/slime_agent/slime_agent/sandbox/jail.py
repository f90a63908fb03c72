"""The bubblewrap command line of one sandboxed command.

Layout inside the jail::

    /usr, /bin, /lib*     the host's system, read-only
    /etc/...              a short whitelist of host files (loader cache, alternatives, TLS roots,
                          timezone, resolver), read-only, plus a synthetic passwd/group
    <python roots>        the interpreter's installation tree(s), read-only, at their host paths
    /proc, /dev           fresh procfs of the sandbox's pid namespace, minimal /dev
    /tmp, /dev/shm        private size-capped tmpfs, gone when the command ends
    /work                 the sandbox's work directory (read-write; the cwd and $HOME)

Every command runs in fresh user, pid, network, ipc, uts and cgroup namespaces. It starts
under :data:`WRAPPER`, a few lines of Python that set the resource limits of
:class:`Limits`, become the unprivileged sandbox user and ``execvp`` the command.

Who the sandbox user is on the host matters for ``RLIMIT_NPROC``: the kernel never enforces it
for processes whose host uid is 0, and a plain ``bwrap --unshare-user --uid 1000`` started by
root maps uid 1000 inside to uid 0 outside. So when the host process is root, bwrap is started
with ``--userns-block-fd`` and the caller writes the id maps itself: inside uid 0 is host root
(bwrap's own setup, which needs to read root-only paths such as ``/root/.pyenv``) and inside
uid 1000 is an unprivileged host uid (``nobody`` by default), which the wrapper switches to
before running anything untrusted. A non-root host process maps uid 1000 to itself as usual.

Nested user namespaces are refused in both cases (``unshare -r`` inside would otherwise give
uid 0 again): bwrap's ``--disable-userns`` for a non-root host process; as root, where bwrap
rejects it next to ``--userns-block-fd``, a seccomp filter (:mod:`slime_agent.sandbox.nouserns`).
Totals over all processes of a sandbox (memory, processes, disk) are not rlimits: see
:mod:`slime_agent.sandbox.cgroup` and :mod:`slime_agent.sandbox.workfs`.
"""

from __future__ import annotations

import glob
import os
import posixpath
import sys
from dataclasses import dataclass

WORK = "/work"
"""Where the work directory appears inside the jail."""

SANDBOX_UID = 1000
SANDBOX_GID = 1000
PYTHON_BIN = "/opt/slime-bin"
"""On ``PATH`` after the interpreter's own bin/: ``python`` and ``python3`` links to it."""
RELOCATED_PYTHON = "/opt/slime-python"
"""Where a Python installation that lives under /work on the host is bound instead."""

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/localtime", "/etc/timezone", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/hosts",
    "/etc/resolv.conf", "/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/mime.types",
    "/etc/os-release", "/etc/debian_version", "/etc/fonts",
)
_NOT_BINDABLE_AT_SAME_PATH = (WORK, "/proc", "/dev", "/etc")

# Runs as the jail's first process; argv[1] is "uid:gid;NAME=soft:hard,..." (uid empty: keep
# the current one), the rest is the command. No imports beyond os/resource/sys: it runs before
# every command and json alone would cost tens of milliseconds. bwrap has already set
# PR_SET_NO_NEW_PRIVS, and every mount is nosuid, so nothing can regain privileges.
WRAPPER = r"""
import os, resource, sys
ids, limits = sys.argv[1].split(";")
for item in limits.split(","):
    name, pair = item.split("=")
    soft, hard = (int(x) for x in pair.split(":"))
    which = getattr(resource, name)
    cur = resource.getrlimit(which)[1]
    if cur != resource.RLIM_INFINITY:
        hard = min(hard, cur)
    resource.setrlimit(which, (min(soft, hard), hard))
uid, gid = ids.split(":")
if uid:
    os.setgroups([])
    os.setgid(int(gid))
    os.setuid(int(uid))
os.closerange(3, 65536)
argv = sys.argv[2:]
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write("sandbox: cannot execute %r: %s\n" % (argv[0], exc.strerror))
    sys.exit(126 if isinstance(exc, PermissionError) else 127)
"""


@dataclass(frozen=True)
class Limits:
    """Per-command limits; each is an rlimit set by :data:`WRAPPER` (hard = soft unless noted)."""

    memory_mb: int = 512
    cpu_seconds: int = 10
    max_processes: int = 64
    file_size_mb: int = 128

    def rlimits(self) -> list[tuple[str, int, int]]:
        mib = 1 << 20
        return [
            ("RLIMIT_AS", self.memory_mb * mib, self.memory_mb * mib),
            # SIGXCPU at the soft limit, SIGKILL one second later.
            ("RLIMIT_CPU", self.cpu_seconds, self.cpu_seconds + 1),
            ("RLIMIT_NPROC", self.max_processes, self.max_processes),
            ("RLIMIT_FSIZE", self.file_size_mb * mib, self.file_size_mb * mib),
            ("RLIMIT_CORE", 0, 0),
        ]


@dataclass(frozen=True)
class PythonMounts:
    """Host installation roots of an interpreter, where they appear inside, and its inner path."""

    binds: tuple[tuple[str, str], ...]
    executable: str

    @property
    def bin_dir(self) -> str:
        return posixpath.dirname(self.executable)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def python_mounts(python: str | None = None) -> PythonMounts:
    """What to bind so that ``python`` (default: this interpreter) runs inside the jail.

    A virtual environment needs its own tree and the base installation its ``bin/python``
    points to; both are found from the path, the resolved path and ``pyvenv.cfg``.
    """
    exe = os.path.abspath(python or sys.executable)
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise ValueError(f"python interpreter {exe!r} does not exist or is not executable")
    exe = os.path.join(os.path.realpath(os.path.dirname(exe)), os.path.basename(exe))
    candidates = [os.path.dirname(os.path.dirname(exe)),
                  os.path.dirname(os.path.dirname(os.path.realpath(exe)))]
    if os.path.realpath(exe) == os.path.realpath(sys.executable):
        candidates += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    cfg = os.path.join(candidates[0], "pyvenv.cfg")
    if os.path.isfile(cfg):
        with open(cfg, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    candidates.append(os.path.dirname(value.strip()))
    roots: list[str] = []
    for cand in sorted({os.path.realpath(c) for c in candidates if c}, key=len):
        if cand == "/" or any(_under(cand, s) for s in _SYSTEM):
            continue
        if any(_under(cand, r) for r in roots):
            continue
        roots.append(cand)
    binds: list[tuple[str, str]] = []
    for i, root in enumerate(roots):
        clash = any(_under(root, p) or _under(p, root) for p in _NOT_BINDABLE_AT_SAME_PATH)
        binds.append((root, f"{RELOCATED_PYTHON}/{i}" if clash else root))
    inner_exe = exe
    for host, inner in binds:
        if _under(exe, host):
            inner_exe = inner + exe[len(host):]
            break
    return PythonMounts(tuple(binds), inner_exe)


def _ancestors(path: str) -> list[str]:
    out = []
    path = posixpath.dirname(path)
    while path not in ("/", ""):
        out.append(path)
        path = posixpath.dirname(path)
    return out[::-1]


def _system_args() -> list[str]:
    args: list[str] = []
    for name in _SYSTEM:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    for name in _ETC + tuple(sorted(glob.glob("/etc/python3*"))):
        args += ["--ro-bind-try", name, name]
    return args


def write_identity_files(etc_dir: str) -> None:
    """A passwd/group that name the sandbox user (tools such as ``whoami`` ask for one)."""
    os.makedirs(etc_dir, exist_ok=True)
    with open(os.path.join(etc_dir, "passwd"), "w", encoding="utf-8") as fh:
        fh.write("root:x:0:0:root:/root:/bin/sh\n"
                 f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:{WORK}:/bin/sh\n"
                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    with open(os.path.join(etc_dir, "group"), "w", encoding="utf-8") as fh:
        fh.write(f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n")


def bwrap_argv(
    bwrap: str,
    command: list[str],
    *,
    limits: Limits,
    python: PythonMounts,
    work_dir: str,
    etc_dir: str,
    info_fd: int,
    userns_block_fd: int | None,
    allow_network: bool,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The full argv: ``bwrap <namespaces> <mounts> python -c WRAPPER <config> <command>``.

    ``userns_block_fd`` set means the caller (root) writes the id maps of the new user
    namespace (see the module docstring); ``None`` lets bwrap map the caller's own uid.
    ``seccomp_fd`` is a compiled filter bwrap applies before the command
    (:mod:`slime_agent.sandbox.nouserns`: the root path's stand-in for ``--disable-userns``).
    """
    args = [bwrap, "--unshare-all"]
    if allow_network:
        args.append("--share-net")
    args.append("--unshare-user")
    if userns_block_fd is not None:
        args += ["--uid", "0", "--gid", "0", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                 "--userns-block-fd", str(userns_block_fd)]
        switch_to: int | None = SANDBOX_UID
    else:
        args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--disable-userns"]
        switch_to = None
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--die-with-parent", "--new-session", "--info-fd", str(info_fd),
             "--hostname", "sandbox"]
    args += ["--perms", "0755", "--dir", "/etc"] + _system_args()
    args += ["--ro-bind", os.path.join(etc_dir, "passwd"), "/etc/passwd",
             "--ro-bind", os.path.join(etc_dir, "group"), "/etc/group"]
    tmp_bytes = str(limits.memory_mb << 20)
    shm_bytes = str(min(limits.memory_mb, 64) << 20)
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", shm_bytes, "--tmpfs", "/dev/shm"]
    made: set[str] = set()
    for _, inner in python.binds:
        for parent in _ancestors(inner):
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
    for host, inner in python.binds:
        args += ["--ro-bind", host, inner]
    # `python` and `python3` name the exposed interpreter even where its bin/ lacks them.
    args += ["--perms", "0755", "--dir", PYTHON_BIN]
    for name in ("python", "python3"):
        args += ["--symlink", python.executable, f"{PYTHON_BIN}/{name}"]
    args += ["--bind", work_dir, WORK, "--chdir", WORK]
    ids = ":" if switch_to is None else f"{switch_to}:{SANDBOX_GID}"
    rlimits = ",".join(f"{name}={soft}:{hard}" for name, soft, hard in limits.rlimits())
    args += [python.executable, "-I", "-S", "-c", WRAPPER, f"{ids};{rlimits}", *command]
    return args
