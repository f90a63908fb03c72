"""Availability of the ``local`` sandbox: is bwrap installed, and can it build a jail here?

:func:`total_limits_report` says which limits hold for a whole sandbox here (cgroups, a
tmpfs ``/work``) and which only per process, with the reason (what the host must provide).

The second question is answered by running ``true`` in a real jail, once per bwrap binary and
effective uid (cached): bwrap may be installed where user namespaces are disabled
(``kernel.unprivileged_userns_clone=0``, ``user.max_user_namespaces=0``, Ubuntu's AppArmor
``kernel.apparmor_restrict_unprivileged_userns``, containers without ``CAP_SYS_ADMIN``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading

from slime_agent.sandbox.local import MISSING_BWRAP, LocalSandbox

_HINT = (
    "(are user namespaces disabled? see `sysctl user.max_user_namespaces`, "
    "`kernel.unprivileged_userns_clone` or `kernel.apparmor_restrict_unprivileged_userns`)"
)
_TRIAL_TIMEOUT_S = 30.0
_cache: dict[tuple[str, int], str | None] = {}
_lock = threading.Lock()


def probe_local_sandbox() -> str | None:
    """``None`` when the local sandbox works here, else a one-line reason; never raises."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return MISSING_BWRAP
    key = (os.path.realpath(bwrap), os.geteuid())
    with _lock:
        if key not in _cache:
            _cache[key] = _trial()
        return _cache[key]


async def _run_true() -> str | None:
    async with LocalSandbox() as box:
        result = await box.exec(["true"], timeout=_TRIAL_TIMEOUT_S)
    if result.exit_code == 0:
        return None
    message = " ".join(result.stderr.split()) or f"exit code {result.exit_code}"
    return f"bwrap is installed but cannot run a sandbox here: {message} {_HINT}"


def total_limits_report() -> dict[str, str]:
    """How a ``local`` sandbox made here enforces memory, processes, disk and nested user
    namespaces (``{"memory": "total 512 MiB (cgroup v1)", ...}``): what the host provides.
    Never raises; without a usable bwrap the only key is ``"sandbox"``."""
    reason = probe_local_sandbox()
    if reason is not None:
        return {"sandbox": reason}
    try:
        box = LocalSandbox()
    except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
        return {"sandbox": f"{type(exc).__name__}: {exc}"}
    report = dict(box.enforcement)
    box._finalizer()  # nothing ran in it: releasing its cgroup, mount and files is all
    return report


def _trial() -> str | None:
    """Run the trial in a thread of its own so that it works inside a running event loop too."""
    answer: list[str | None] = []

    def target() -> None:
        try:
            answer.append(asyncio.run(_run_true()))
        except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
            message = " ".join(str(exc).split())
            answer.append(f"bwrap is installed but cannot run a sandbox here: {message} {_HINT}")

    thread = threading.Thread(target=target, name="slime-sandbox-probe", daemon=True)
    thread.start()
    thread.join(_TRIAL_TIMEOUT_S + 10)
    if not answer:
        return f"bwrap is installed but a trial sandbox did not finish in {_TRIAL_TIMEOUT_S:.0f} s"
    return answer[0]
