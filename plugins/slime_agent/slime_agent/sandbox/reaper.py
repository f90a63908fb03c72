"""Reaping each jail's init: bwrap leaves it behind as a zombie.

With ``--unshare-pid`` bwrap's outer process learns the command's exit status from the jail's
init (pid 1 of the namespace) through an eventfd and exits at once, without waiting for that
init. The init, exiting just after, is an orphan: it goes to the host's PID 1, and where PID 1
does not reap (Docker without ``--init``, many CI runners) it stays a ``[bwrap] <defunct>``
zombie for good -- and keeps its charge in the sandbox's ``pids`` cgroup, so a sandbox with
``max_processes=8`` refused its 9th command (``bwrap: Can't fork``).

So this process becomes a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4+):
orphans of its descendants are reparented to it instead of PID 1, and
:func:`reap_jail_init` waits for the one init it knows, through the pidfd taken when bwrap
reported it (never a bare pid, which another process may have by then). The attribute is
process-wide: other orphaned grandchildren come here too and stay zombies until this process
exits (their status is not the sandbox's to take), where a reaping PID 1 would have collected
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import threading

_PR_SET_CHILD_SUBREAPER = 36
_lock = threading.Lock()
_state: dict[str, str | None] = {}


def become_subreaper() -> str | None:
    """Make this process a child subreaper (once); ``None`` on success, else why not."""
    with _lock:
        if "why" not in _state:
            _state["why"] = _set_subreaper()
        return _state["why"]


def _set_subreaper() -> str | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as exc:  # not Linux, or no prctl symbol
        return f"prctl(PR_SET_CHILD_SUBREAPER) is not available: {exc}"
    return None


async def _exited(pidfd: int, timeout: float) -> bool:
    """Wait until the process of ``pidfd`` has exited (a pidfd polls readable then)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(pidfd, lambda: None if done.done() else done.set_result(None))
    try:
        await asyncio.wait_for(done, timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)


async def reap_jail_init(pidfd: int | None, timeout: float) -> None:
    """Reap the jail's init of ``pidfd`` once bwrap itself has exited (it is then this
    process's child, being a subreaper). An init still running after ``timeout`` seconds is
    killed first. A no-op without a pidfd, where this process is not a subreaper, or where
    the init is not its child (already reaped, or given to PID 1)."""
    if pidfd is None or become_subreaper() is not None:
        return
    if not await _exited(pidfd, timeout):
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        await _exited(pidfd, timeout)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
