"""Issue 38, item 4: every command of a ``LocalSandbox`` is reaped to its last process.

bwrap exits without waiting for its jail's init; that init stayed a ``[bwrap] <defunct>``
zombie of PID 1, which here (as in Docker without ``--init``) never reaps, and kept its charge
in the sandbox's pids cgroup: with ``max_processes=8`` the 9th command failed with
``bwrap: Can't fork``. Real bubblewrap; the probe fails the test where it cannot run.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from slime_agent.sandbox import LocalSandbox, probe_local_sandbox


@pytest.fixture(autouse=True)
def require_bwrap() -> None:
    reason = probe_local_sandbox()
    if reason is not None:
        pytest.fail(f"the local sandbox cannot run here: {reason}")


def zombie_children() -> list[str]:
    """``pid comm`` of every zombie whose parent is this process (a /proc scan)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        if state == "Z" and int(ppid) == os.getpid():
            found.append(f"{entry} {comm}")
    return found


def test_three_times_max_processes_commands_in_a_row_leave_no_zombie():
    limit = 4
    # the subreaper is process-wide: orphans of earlier tests in this process may already be
    # zombies here (docs/agentic.md); only the sandbox's own (bwrap) zombies are counted
    before = set(zombie_children())

    async def go() -> list[tuple[int, str, str]]:
        out = []
        async with LocalSandbox(max_processes=limit, cpu_seconds=5) as box:
            for k in range(3 * limit):
                r = await box.exec(f"echo run-{k}", timeout=30)
                out.append((r.exit_code, r.stdout.strip(), r.stderr.strip()))
            cg = box._host.cgroup
            # every process of every command is gone from the sandbox's pids cgroup
            if cg is not None:
                with open(os.path.join(cg.pids_dir, "pids.current"), encoding="ascii") as fh:
                    assert int(fh.read()) == 0
            assert box.reaping == "each command's jail init is reaped"
        return out

    results = asyncio.run(go())
    assert results == [(0, f"run-{k}", "") for k in range(3 * limit)]
    assert [z for z in zombie_children() if z not in before and z.endswith("bwrap")] == []
