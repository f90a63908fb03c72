"""The ``e2b`` sandbox on the real e2b SDK against the local stand-in (tests/standin.py)."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_e2b.plugin import make_sandbox, probe
from sandbox_e2b.sandbox import E2BSandbox, E2BSandboxError
from slime_hookspecs import Sandbox


def run(coro):
    return asyncio.run(coro)


def test_exec_files_and_lifecycle_through_the_sdk(server, options):
    async def episode():
        async with E2BSandbox(options(metadata={"run": "t"}, envs={"BASE": "1"})) as box:
            assert isinstance(box, Sandbox)
            await box.write_file("snippet.py", "import os\nprint(6 * 7, os.environ['BASE'], "
                                               "os.environ['EXTRA'])\n")
            ok = await box.exec(["python3", "-I", "snippet.py"], env={"EXTRA": "x y"})
            bad = await box.exec("echo oops >&2; exit 3")
            await box.write_file("/home/user/data/blob.bin", bytes(range(256)))
            blob = await box.read_file("data/blob.bin")
            made = await box.exec("printf made > out.txt")
            out = await box.read_file("/home/user/out.txt")
            return box.sandbox_id, ok, bad, blob, made, out

    sid, ok, bad, blob, made, out = run(episode())
    assert (ok.exit_code, ok.stdout, ok.timed_out) == (0, "42 1 x y\n", False)
    assert (bad.exit_code, bad.stdout, bad.stderr) == (3, "", "oops\n")
    assert blob == bytes(range(256)) and made.exit_code == 0 and out == b"made"
    # one sandbox, created with the template, lifetime and metadata, killed at the end
    (created,) = server.created
    assert created["templateID"] == "base" and created["timeout"] == 300
    assert created["metadata"] == {"run": "t"} and created["envVars"] == {"BASE": "1"}
    assert server.killed == [sid] and not server.boxes
    paths = {p for _, p in server.calls}
    assert {"/v2/sandboxes", "/files", "/process.Process/Start", f"/sandboxes/{sid}"} <= paths


def test_timeout_keeps_the_output_so_far_and_the_cap_cuts(server, options):
    async def episode():
        async with E2BSandbox(options(max_output_bytes=100)) as box:
            slow = await box.exec("echo started; sleep 30", timeout=1.5)
            big = await box.exec("python3 -c \"print('x' * 5000)\"")
            after = await box.exec("echo still usable")
            return slow, big, after

    slow, big, after = run(episode())
    assert slow.timed_out and slow.exit_code == 137 and slow.stdout == "started\n"
    assert slow.duration_s < 15
    assert big.truncated and big.stdout == "x" * 100 and big.exit_code == 0
    assert after.stdout == "still usable\n"


def test_errors_name_the_endpoint_or_the_missing_key(server, options, monkeypatch):
    monkeypatch.setenv("SLIME_TEST_E2B_KEY", "wrong")
    with pytest.raises(E2BSandboxError, match=f"at {server.url} failed"):
        run(E2BSandbox(options()).start())
    monkeypatch.delenv("SLIME_TEST_E2B_KEY")
    with pytest.raises(E2BSandboxError, match="SLIME_TEST_E2B_KEY is not set"):
        run(E2BSandbox(options()).start())
    assert not server.boxes

    async def closed():
        box = E2BSandbox(options())
        await box.close()
        await box.close()  # idempotent
        with pytest.raises(E2BSandboxError, match="closed"):
            await box.exec("true")

    run(closed())


def test_factory_merges_the_section_with_the_sandbox_options(server, options):
    class Cfg:
        e2b = options(template="py")

    box = make_sandbox(Cfg(), work_dir="/tmp/w", max_output_bytes=10)
    assert (box.options.template, box.options.work_dir, box.options.max_output_bytes) == (
        "py", "/tmp/w", 10)
    assert box.options.api_url == server.url
    with pytest.raises(TypeError, match="unknown option.*'memory_mb'"):
        make_sandbox(Cfg(), memory_mb=512)


def test_probe_needs_only_the_sdk(monkeypatch):
    import importlib.util

    assert probe() is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "e2b SDK is not installed" in probe()


def test_connection_options_pass_only_what_is_set(monkeypatch):
    from sandbox_e2b.config import E2BSection

    monkeypatch.setenv("MY_KEY", "k1")
    opts = E2BSandbox(E2BSection(domain="e2b.example.org", api_key_env="MY_KEY",
                                 request_timeout_s=5)).connection_options()
    assert opts == {"api_key": "k1", "request_timeout": 5, "domain": "e2b.example.org"}
    # the SDK itself then addresses that domain: REST at api.<domain>, envd over https
    from e2b import ConnectionConfig

    cc = ConnectionConfig(**opts)
    assert cc.api_url == "https://api.e2b.example.org"
    assert cc.get_sandbox_url("sbx1", "e2b.example.org").startswith("https://")
