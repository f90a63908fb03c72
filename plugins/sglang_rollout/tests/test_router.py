"""The real sglang-router (Rust, runs on CPU) in front of SGLang-shaped servers.

Needs an interpreter with ``sglang-router`` installed: this one, or the one named by
``SLIME_SGLANG_ROUTER_PYTHON`` (CI puts the router in a venv of its own, ``sglang.python`` then
launches it from there); skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from sglang_rollout.engine import SGLangEngine
from sglang_rollout.launch import free_port
from slime_hookspecs import SamplingParams

ROUTER_PYTHON = os.environ.get("SLIME_SGLANG_ROUTER_PYTHON") or (
    sys.executable if importlib.util.find_spec("sglang_router") else "")

pytestmark = pytest.mark.skipif(
    not ROUTER_PYTHON, reason="sglang-router is not installed (pip install sglang-router, or set "
                              "SLIME_SGLANG_ROUTER_PYTHON to a python that has it)")


def test_engines_launch_the_router_register_and_generate_through_it(fake_server, resolve,
                                                                   tmp_path: Path) -> None:
    servers = [fake_server(), fake_server()]
    router_url = f"http://127.0.0.1:{free_port()}"
    _, config = resolve({
        "run": {"run_dir": str(tmp_path / "run")},
        "rollout": {"engine": "sglang", "num_engines": 2},
        "sglang": {"urls": [s.url for s in servers], "router_url": router_url,
                   "launch_router": True, "python": ROUTER_PYTHON, "startup_timeout_s": 60,
                   "router_args": {"policy": "round_robin"}},
    })
    engines = [SGLangEngine(config, i) for i in range(2)]
    try:
        router_proc = engines[0].servers.router_proc
        assert router_proc is not None and router_proc.alive()
        assert engines[1].servers.router_proc is None  # one router, started by engine 0
        prompts = [[i + 1] for i in range(8)]
        outs = engines[0].generate(prompts, [SamplingParams(max_new_tokens=3)] * 8)
        assert [o.token_ids for o in outs] == [[p[0] + 1, p[0] + 2, p[0] + 3] for p in prompts]
        assert all(o.finish_reason == "length" and len(o.log_probs) == 3 for o in outs)
        served = [s.paths().count("/generate") for s in servers]
        assert sum(served) == 8 and min(served) > 0  # the router spread them
        engines[1].abort()
        assert "/abort_request" in servers[1].paths() and "/abort_request" not in servers[0].paths()
    finally:
        for e in reversed(engines):
            e.shutdown()
    assert router_proc.proc.poll() is not None
    assert "-m sglang_router.launch_router" in (tmp_path / "run" / "sglang" / "router.log").read_text()
