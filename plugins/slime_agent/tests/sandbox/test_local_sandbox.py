"""The ``local`` sandbox against the real bubblewrap: isolation, limits, kill, files, probe.

Every test builds real jails; none is mocked. They need ``bwrap`` on PATH and user namespaces
(``apt-get install bubblewrap``); without them the ``require_bwrap`` fixture fails with the
probe's reason rather than skipping, so a CI without bubblewrap cannot pass silently.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from slime_agent.sandbox import (
    MISSING_BWRAP,
    LocalSandbox,
    SandboxError,
    probe_local_sandbox,
    sandbox_records,
)
from slime_hookspecs.protocols import ExecResult, Sandbox
from slime_hookspecs.records import SandboxRecord


@pytest.fixture(autouse=True)
def require_bwrap(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("no_bwrap_needed"):
        return
    reason = probe_local_sandbox()
    if reason is not None:
        pytest.fail(f"the local sandbox cannot run here: {reason}")


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def one(cmd, **options):  # type: ignore[no-untyped-def]
    timeout = options.pop("timeout", 20.0)
    env = options.pop("env", None)
    async with LocalSandbox(**options) as box:
        return await box.exec(cmd, timeout=timeout, env=env)


def marker_processes(marker: str) -> list[list[str]]:
    """Argv of every host process whose command line contains ``marker`` (a /proc scan)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        if marker.encode() in raw:
            found.append([a.decode(errors="replace") for a in raw.split(b"\0") if a])
    return found


def sleepers(marker: str) -> int:
    """How many ``sleep <marker>`` processes exist (bwrap's and sh's own argv do not count)."""
    return sum(1 for argv in marker_processes(marker)
               if os.path.basename(argv[0]) == "sleep" and argv[1:] == [marker])


# -- running code ---------------------------------------------------------------------------


def test_runs_python_and_returns_output_and_exit_code() -> None:
    code = (
        "import os, sys\n"
        "print('hello', 6 * 7)\n"
        "print(os.getcwd(), os.environ['HOME'], os.environ.get('FOO'), "
        "os.environ.get('SLIME_TEST_HOST_SECRET'))\n"
        "sys.stdout.flush()\n"
        "sys.stdout.buffer.write(b'bad\\xff\\n')\n"
        "print('oops', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    os.environ["SLIME_TEST_HOST_SECRET"] = "leaked"
    try:
        result = run(one(["python", "-c", code], env={"FOO": "bar"}))
    finally:
        del os.environ["SLIME_TEST_HOST_SECRET"]
    assert isinstance(result, ExecResult)
    assert result.exit_code == 3
    assert result.stdout.splitlines() == ["hello 42", "/work /work bar None", "bad\ufffd"]
    assert result.stderr == "oops\n"
    assert not result.timed_out and not result.truncated
    assert 0 < result.duration_s < 10

    shell = run(one("echo $((2 + 3)); id -u; exit 7"))
    assert (shell.exit_code, shell.stdout) == (7, "5\n1000\n")
    missing = run(one(["no-such-program"]))
    assert missing.exit_code == 127 and "no-such-program" in missing.stderr
    killed = run(one("kill -9 $$"))
    assert killed.exit_code == 128 + 9 and not killed.timed_out


def test_runs_as_unprivileged_user_without_capabilities() -> None:
    result = run(one("grep -E '^(Uid|CapEff|NoNewPrivs)' /proc/self/status; whoami"))
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    assert lines["Uid"].split() == ["1000"] * 4
    assert int(lines["CapEff"], 16) == 0
    assert lines["NoNewPrivs"].strip() == "1"
    assert result.stdout.splitlines()[-1] == "sandbox"


def test_concurrent_commands_share_the_work_dir() -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox() as box:
            results = await asyncio.gather(
                *(box.exec(f"sleep 0.3; echo {i} > f{i}; cat f{i}") for i in range(3))
            )
            listing = await box.exec("cat f0 f1 f2")
            return results, listing

    results, listing = run(scenario())
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
    assert listing.stdout == "0\n1\n2\n"


# -- isolation ------------------------------------------------------------------------------


def test_cannot_open_network_connections() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    accepted: list[bool] = []

    def accept() -> None:
        server.settimeout(15)
        try:
            while True:
                conn, _ = server.accept()
                accepted.append(True)
                conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = (
        "import socket, sys\n"
        "for host in ('127.0.0.1', '1.1.1.1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2).close()\n"
        "        print(host, 'connected')\n"
        "    except OSError as exc:\n"
        "        print(host, 'failed', type(exc).__name__)\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"
    )
    try:
        jailed = run(one(["python", "-c", code]))
        assert jailed.exit_code == 0, jailed.stderr
        lines = jailed.stdout.splitlines()
        assert lines[0].startswith("127.0.0.1 failed"), lines
        assert lines[1].startswith("1.1.1.1 failed"), lines
        assert lines[2] == "['lo']"
        assert accepted == []
        # Control: the same code reaches the server when the network is shared.
        shared = run(one(["python", "-c", code], allow_network=True))
        assert shared.stdout.splitlines()[0] == "127.0.0.1 connected", shared
        assert accepted == [True]
    finally:
        server.close()


def test_cannot_write_outside_its_work_directory(tmp_path: Path) -> None:
    tag = f"slime-escape-{random.randrange(10**9)}"
    host_home = Path(os.path.expanduser("~"))
    targets = {
        "usr": Path("/usr") / tag,
        "etc": Path("/etc") / tag,
        "home": host_home / tag,
        "python": Path(sys.prefix) / tag,
        "test_tmp": tmp_path / tag,
    }
    code = (
        "import os, sys\n"
        "for name, path in [a.split('=', 1) for a in sys.argv[1:]]:\n"
        "    try:\n"
        "        if name == 'test_tmp':\n"
        "            os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        with open(path, 'w') as fh:\n"
        "            fh.write('x')\n"
        "        print(name, 'written')\n"
        "    except OSError as exc:\n"
        "        print(name, 'refused', exc.strerror)\n"
        "open('/work/inside', 'w').write('ok')\n"
        "open('/tmp/scratch', 'w').write('ok')\n"
    )
    argv = ["python", "-c", code] + [f"{name}={path}" for name, path in targets.items()]

    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox() as box:
            result = await box.exec(argv)
            inside = Path(box.work_dir, "inside").read_text()
            tmp_again = await box.exec("cat /tmp/scratch")
            return result, inside, tmp_again

    result, inside, tmp_again = run(scenario())
    assert result.exit_code == 0, result.stderr
    outcome = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    for name in ("usr", "etc", "home", "python"):
        assert outcome[name].startswith("refused"), (name, outcome[name])
    # The test's tmp path does not exist in the jail: creating it lands on the jail's tmpfs.
    for name, path in targets.items():
        assert not path.exists(), f"{name}: {path} was created on the host"
    assert inside == "ok"
    assert tmp_again.exit_code != 0, "/tmp must be private to each command"


# -- time, kill ----------------------------------------------------------------------------


def test_timeout_kills_the_whole_process_tree() -> None:
    marker = f"4242{random.randrange(10**6, 10**7)}"
    cmd = (
        f"sleep {marker} & "  # a plain background child
        f"setsid sleep {marker} & "  # a child in a session of its own
        f"(sleep {marker} &) ; "  # an orphaned grandchild
        f"python -c 'import os, subprocess; os.fork(); subprocess.run([\"sleep\", \"{marker}\"])' & "
        f"sleep {marker}"
    )

    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox() as box:
            task = asyncio.create_task(box.exec(cmd, timeout=3.0))
            seen = 0
            for _ in range(100):  # the whole tree is running on the host before the timeout
                await asyncio.sleep(0.05)
                seen = sleepers(marker)
                if seen == 6:
                    break
            return await task, seen

    result, seen = run(scenario())
    assert seen == 6, marker_processes(marker)
    assert result.timed_out
    assert result.exit_code == 128 + 9
    assert 2.5 < result.duration_s < 8
    deadline = time.monotonic() + 2
    while marker_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker_processes(marker) == []


def test_background_processes_die_with_the_command() -> None:
    marker = f"4343{random.randrange(10**6, 10**7)}"
    result = run(one(f"setsid sleep {marker} & sleep {marker} & echo started"))
    assert result.stdout == "started\n" and not result.timed_out
    assert result.duration_s < 5
    assert marker_processes(marker) == []


def test_close_kills_running_commands_and_removes_the_work_dir() -> None:
    marker = f"4444{random.randrange(10**6, 10**7)}"

    async def scenario():  # type: ignore[no-untyped-def]
        box = LocalSandbox()
        await box.write_file("keep.txt", "x")
        task = asyncio.create_task(box.exec(f"sleep {marker}", timeout=60))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if sleepers(marker):
                break
        started = time.monotonic()
        await box.close()
        result = await asyncio.wait_for(task, 5)
        with pytest.raises(SandboxError, match="closed"):
            await box.exec("true")
        return box.work_dir, result, time.monotonic() - started

    work_dir, result, took = run(scenario())
    assert took < 5
    assert result.exit_code == 128 + 9
    assert not os.path.exists(work_dir)
    assert marker_processes(marker) == []


def test_cpu_time_limit() -> None:
    result = run(one(["python", "-c", "while True: pass"], cpu_seconds=1, timeout=30))
    assert not result.timed_out  # stopped by its CPU time, not by the wall clock
    assert result.exit_code == 128 + 24  # SIGXCPU at the soft limit


# -- memory, processes, output -------------------------------------------------------------


def test_cannot_exhaust_memory() -> None:
    code = (
        "import sys\n"
        "small = bytearray(64 * 1024 * 1024)\n"
        "print('64 MiB ok')\n"
        "try:\n"
        "    big = bytearray(2 * 1024 ** 3)\n"
        "except MemoryError:\n"
        "    print('2 GiB refused')\n"
        "    sys.exit(1)\n"
        "print('2 GiB allocated')\n"
    )
    result = run(one(["python", "-c", code], memory_mb=256))
    assert result.stdout == "64 MiB ok\n2 GiB refused\n", result
    assert result.exit_code == 1
    assert result.duration_s < 8


def test_cannot_exhaust_processes() -> None:
    limit = 16
    code = (
        "import os, time\n"
        "started = 0\n"
        "for _ in range(500):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    started += 1\n"
        "print(started)\n"
    )
    result = run(one(["python", "-c", code], max_processes=limit))
    assert result.exit_code == 0, result.stderr
    started = int(result.stdout)
    assert 1 <= started < limit  # the forking process itself counts too
    assert not result.timed_out and result.duration_s < 8
    assert run(one("echo still fine")).stdout == "still fine\n"


def test_output_is_capped_and_flagged() -> None:
    code = "import sys; sys.stdout.write('x' * 100000); sys.stderr.write('y' * 5000)"
    result = run(one(["python", "-c", code], output_cap_bytes=1000))
    assert result.stdout == "x" * 1000 and result.stderr == "y" * 1000
    assert result.truncated and result.exit_code == 0
    flood = run(one("head -c 50000000 /dev/zero; echo done >&2", output_cap_bytes=4096))
    assert len(flood.stdout) == 4096 and flood.truncated and flood.stderr == "done\n"
    small = run(one("echo fits", output_cap_bytes=1000))
    assert small.stdout == "fits\n" and not small.truncated


# -- files ----------------------------------------------------------------------------------


def test_write_and_read_files_in_the_work_dir() -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox() as box:
            await box.write_file("sub/dir/in.txt", "from host\n")
            await box.write_file("/work/raw.bin", b"\x00\x01")
            result = await box.exec("cat sub/dir/in.txt; echo from jail >> sub/dir/in.txt; "
                                    "wc -c < raw.bin; echo out > out.txt")
            return (result, await box.read_file("/work/sub/dir/in.txt"),
                    await box.read_file("out.txt"), os.stat(Path(box.work_dir, "raw.bin")))

    result, back, out, st = run(scenario())
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "from host\n2\n"
    assert back == b"from host\nfrom jail\n" and out == b"out\n"
    if os.geteuid() == 0:
        assert st.st_uid == 65534  # handed to the unprivileged sandbox user


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "/work/../etc/passwd", "a/../../x",
                                  "", "/work", "/workshop/x"])
def test_paths_escaping_the_work_dir_are_rejected(path: str) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox() as box:
            with pytest.raises(ValueError, match="sandbox path"):
                await box.read_file(path)
            with pytest.raises(ValueError, match="sandbox path"):
                await box.write_file(path, "x")

    run(scenario())


def test_links_and_fifos_planted_by_the_sandbox_are_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("host secret")
    outside = tmp_path / "outside"
    outside.mkdir()

    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox() as box:
            # Links to host paths (which the jail cannot see, but the host would follow).
            made = await box.exec(f"ln -s {victim} link && ln -s {outside} dirlink && "
                                  "mkfifo fifo && echo ok")
            assert made.stdout == "ok\n", made.stderr
            for path in ("link", "dirlink/x", "fifo"):
                with pytest.raises(ValueError, match="sandbox path"):
                    await asyncio.wait_for(box.read_file(path), 5)
                with pytest.raises(ValueError, match="sandbox path"):
                    await asyncio.wait_for(box.write_file(path, "overwritten"), 5)

    run(scenario())
    assert victim.read_text() == "host secret"
    assert list(outside.iterdir()) == []


def test_given_work_dir_is_kept(tmp_path: Path) -> None:
    work = tmp_path / "work"

    async def scenario():  # type: ignore[no-untyped-def]
        async with LocalSandbox(work_dir=work) as box:
            return await box.exec("echo persisted > note.txt")

    assert run(scenario()).exit_code == 0
    assert (work / "note.txt").read_text() == "persisted\n"


# -- record and probe ------------------------------------------------------------------------


def test_record_builds_a_sandbox() -> None:
    (record,) = sandbox_records()
    assert isinstance(record, SandboxRecord) and record.name == "local"
    assert record.unavailable_reason() is None
    box = record.factory(None, memory_mb=128, cpu_seconds=2)

    async def scenario():  # type: ignore[no-untyped-def]
        async with box as entered:
            assert isinstance(entered, Sandbox)
            return await entered.exec("ulimit -v; ulimit -t")

    assert run(scenario()).stdout == f"{128 * 1024}\n2\n"


@pytest.mark.no_bwrap_needed
def test_missing_bwrap_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    expected = ("bwrap not found on PATH; install it with `apt-get install bubblewrap` "
                "(Debian/Ubuntu) or your distribution's bubblewrap package")
    assert MISSING_BWRAP == expected
    assert probe_local_sandbox() == expected
    assert sandbox_records()[0].unavailable_reason() == expected
    with pytest.raises(SandboxError) as info:
        LocalSandbox()
    assert str(info.value) == expected


@pytest.mark.no_bwrap_needed
def test_bwrap_that_cannot_create_namespaces_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A stand-in for bwrap on a host where user namespaces are off: it fails as bwrap does.
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    message = ("bwrap: No permissions to create a new namespace, likely because the kernel "
               "does not allow non-privileged user namespaces.")
    fake.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    reason = probe_local_sandbox()
    assert reason is not None
    assert reason.startswith("bwrap is installed but cannot run a sandbox here")
    assert message in reason and "user namespaces" in reason
    assert probe_local_sandbox() == reason  # cached: one trial per bwrap binary and uid
