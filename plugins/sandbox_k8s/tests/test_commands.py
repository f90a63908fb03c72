"""What goes through the exec stream: argv, tar transfer, exit status, output caps.

The in-pod command lines are run here with this machine's ``sh``, coreutils and GNU tar
(the default image, python:3.12-slim, is Debian with the same tools); the websocket between
the client and the kubelet is not exercised (see the README).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from sandbox_k8s import commands

needs_tools = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("sh", "timeout", "tar", "head", "env")),
    reason="needs sh, timeout, tar, head and env",
)


def test_exec_command_wraps_with_timeout_kill():
    assert commands.build_exec_command("echo hi", 30) == [
        "timeout", "-s", "KILL", "30", "sh", "-c", "echo hi"]
    assert commands.build_exec_command(["python", "-c", "1"], 2.1) == [
        "timeout", "-s", "KILL", "3", "python", "-c", "1"]
    assert commands.build_exec_command(["true"], 0.01)[3] == "1"


def test_exec_command_env():
    argv = commands.build_exec_command(["printenv", "A"], 5, {"A": "x y", "B_2": ""})
    assert argv == ["timeout", "-s", "KILL", "5", "env", "A=x y", "B_2=", "printenv", "A"]
    with pytest.raises(ValueError, match="environment variable"):
        commands.build_exec_command("true", 5, {"A=B": "x"})
    with pytest.raises(ValueError, match="empty"):
        commands.build_exec_command([], 5)


def test_exec_call_kwargs_name_the_pod_namespace_and_container():
    kw = commands.exec_call_kwargs("slime-sbx-1", "tools", ["ls"], stdin=False)
    assert kw == {"name": "slime-sbx-1", "namespace": "tools", "command": ["ls"],
                  "container": "sandbox", "stdin": False, "stdout": True, "stderr": True,
                  "tty": False, "binary": True, "_preload_content": False}


@needs_tools
def test_exec_command_runs_and_is_killed_at_the_timeout():
    argv = commands.build_exec_command('printf "%s" "$GREETING"', 5, {"GREETING": "hello"})
    done = subprocess.run(argv, capture_output=True)
    assert (done.returncode, done.stdout) == (0, b"hello")
    # ``timeout`` SIGKILLs its whole process group, itself included: a parent sees signal 9
    # (Python: -9; a shell or the container runtime: 128 + 9 = 137). The background sleep,
    # which holds the stdout pipe open, dies too, or capture_output would wait 30 s.
    argv = commands.build_exec_command("sleep 30 & sleep 30; echo never", 1)
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, timeout=20)
    assert done.returncode in (-9, commands.TIMEOUT_EXIT_CODE) and done.stdout == b""
    assert time.monotonic() - start < 10


@needs_tools
def test_write_then_read_roundtrip_with_local_tar(tmp_path):
    target = str(tmp_path / "deep" / ("d" * 120) / "data.bin")  # past ustar's 100 chars
    payload = bytes(range(256)) * 1000
    archive = commands.make_tar(target, payload)
    # trailing bytes after the archive must not be read: head -c stops at the size
    done = subprocess.run(commands.build_write_command(len(archive)),
                          input=archive + b"JUNK" * 100, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "deep" / ("d" * 120) / "data.bin").read_bytes() == payload
    done = subprocess.run(commands.build_read_command(target), capture_output=True)
    assert done.returncode == 0, done.stderr
    assert commands.extract_tar_member(done.stdout, target) == payload


@needs_tools
def test_read_command_reports_missing_file_and_directory(tmp_path):
    done = subprocess.run(commands.build_read_command(str(tmp_path / "nope")),
                          capture_output=True)
    assert done.returncode == 2 and b"no such file" in done.stderr
    done = subprocess.run(commands.build_read_command(str(tmp_path)), capture_output=True)
    assert done.returncode == 3


def test_resolve_path():
    assert commands.resolve_path("a/../b.txt", "/workspace") == "/workspace/b.txt"
    assert commands.resolve_path("/etc/x", "/workspace") == "/etc/x"
    with pytest.raises(ValueError):
        commands.resolve_path("..", "/")
    with pytest.raises(ValueError):
        commands.resolve_path("", "/workspace")


@pytest.mark.parametrize("raw,expected", [
    (b'{"metadata":{},"status":"Success"}', (0, "")),
    (json.dumps({"metadata": {}, "status": "Failure",
                 "message": "command terminated with non-zero exit code: exit status 3",
                 "reason": "NonZeroExitCode",
                 "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}), (3, "")),
    (json.dumps({"status": "Failure", "reason": "InternalError",
                 "message": 'exec: "nope": executable file not found in $PATH'}),
     (-1, 'exec: "nope": executable file not found in $PATH')),
    (b"", (-1, "the exec stream closed without an exit status")),
    (None, (-1, "the exec stream closed without an exit status")),
])
def test_parse_exec_status(raw, expected):
    assert commands.parse_exec_status(raw) == expected


def test_parse_exec_status_garbage():
    code, message = commands.parse_exec_status(b"not json")
    assert code == -1 and "unreadable" in message


def test_capped_buffer():
    buf = commands.CappedBuffer(5)
    buf.write(b"abc")
    buf.write("déf")
    buf.write(b"more")
    assert buf.getvalue() == b"abcd\xc3" and buf.truncated
    assert buf.text() == "abcd\ufffd"
    small = commands.CappedBuffer(10)
    small.write(b"ok")
    assert not small.truncated and small.text() == "ok"
