"""Item 13 of issue 17: limits hold for a sandbox in total, and no nested user namespaces.

Real bubblewrap jails. Where the host cannot give a sandbox a cgroup or a tmpfs (not root, no
delegated cgroup), the total-limit tests fail with the reason from ``total_limits_report``
rather than skipping, so a host that loses the capability is noticed.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from slime_agent.sandbox import (
    LocalSandbox,
    SandboxError,
    cgroup,
    probe_local_sandbox,
    total_limits_report,
)


@pytest.fixture(autouse=True)
def require_bwrap() -> None:
    reason = probe_local_sandbox()
    if reason is not None:
        pytest.fail(f"the local sandbox cannot run here: {reason}")


def _require(kind: str) -> None:
    report = total_limits_report()
    if not report.get(kind, "").startswith("total"):
        pytest.fail(f"this host does not enforce a total {kind} limit: {report}")


HOLD = (
    "import os, sys, time\n"
    "b = bytearray({mib} * 1024 * 1024)\n"
    "b[::4096] = b'x' * len(b[::4096])  # touch every page: resident, not only reserved\n"
    "print('held', os.getpid(), time.time(), flush=True)\n"
    "time.sleep(8)\n"
    "print('done', os.getpid(), time.time(), flush=True)\n"
)


def _max_overlap(stdout: str) -> int:
    """Most *surviving* processes (those that printed ``done``) that held their memory at one
    instant. Under load the processes start staggered, so a count of 'held' lines over-counts,
    and the kernel may let a process hold its pages for a moment before killing it, so only
    survivors prove the limit was exceeded."""
    held: dict[str, float] = {}
    done: dict[str, float] = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in ("held", "done"):
            (held if parts[0] == "held" else done)[parts[1]] = float(parts[2])
    events = [(held[p], 1) for p in done if p in held] + [(t, -1) for t in done.values()]
    now = best = 0
    for _, step in sorted(events):
        now += step
        best = max(best, now)
    return best


def test_memory_limit_is_for_all_processes_together() -> None:
    _require("memory")
    # four processes of 100 MiB in a 256 MiB sandbox: each fits its RLIMIT_AS, the sum does not
    code = HOLD.format(mib=100)
    script = "".join("python -c \"$C\" & " for _ in range(4)) + "wait"

    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox(memory_mb=256) as box:
            return await box.exec(script, env={"C": code}, timeout=30)

    result = asyncio.run(scenario())
    assert result.stdout.count("held") >= 1, result
    assert _max_overlap(result.stdout) <= 2, result


def test_process_limit_is_shared_by_concurrent_commands() -> None:
    _require("processes")
    code = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(20):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(15)\n"  # long enough to overlap the other command's forks under load
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n, flush=True)\n"
        "time.sleep(15)\n"
    )

    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox(max_processes=8) as box:
            return await asyncio.gather(*(box.exec(["python", "-c", code], timeout=60)
                                          for _ in range(2)))

    results = asyncio.run(scenario())
    started = [int(r.stdout.split()[0]) for r in results]
    # 8 processes in all: the two forking parents and their children
    assert sum(started) + 2 <= 8, (started, results)


def test_work_dir_has_a_total_size() -> None:
    _require("disk")

    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox(disk_mb=32, file_size_mb=16) as box:
            # five files of 10 MiB: each below RLIMIT_FSIZE, 50 MiB together
            res = await box.exec("for i in 1 2 3 4 5; do head -c 10485760 /dev/zero > f$i "
                                 "|| echo full; done; du -sm /work | cut -f1", timeout=30)
            host = box.work_dir
            return res, host

    result, host = asyncio.run(scenario())
    assert "full" in result.stdout, result
    assert int(result.stdout.split()[-1]) <= 32
    assert not os.path.exists(host)  # unmounted and removed by close()


def test_report_names_the_mechanism_and_cleanup_leaves_nothing() -> None:
    report = total_limits_report()
    assert set(report) == {"memory", "processes", "disk", "user_namespaces"}, report
    for key in ("memory", "processes"):
        assert report[key].startswith("total") or "per " in report[key]
    box = LocalSandbox()
    dirs = list(box._host.cgroup.dirs) if box._host.cgroup is not None else []
    asyncio.run(box.close())
    assert dirs and not any(os.path.exists(d) for d in dirs)


def test_required_totals_refuse_a_host_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "detect", lambda: "no cgroup v2 hierarchy is mounted")
    with pytest.raises(SandboxError, match="not enforced here: memory: per process only"):
        LocalSandbox(require_total_limits=True)
    box = LocalSandbox()
    assert box.enforcement["memory"] == (
        "per process only (RLIMIT_AS): no cgroup v2 hierarchy is mounted")
    asyncio.run(box.close())


def test_no_nested_user_namespaces() -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox() as box:
            return await box.exec("unshare -r id -u; echo rc=$?", timeout=20)

    result = asyncio.run(scenario())
    assert "rc=0" not in result.stdout and "0\n" not in result.stdout, result
    assert total_limits_report()["user_namespaces"].startswith("refused")
