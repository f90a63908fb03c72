"""Launching servers: the command line, readiness, logs, failures and termination.

SGLang cannot start here (no CUDA), so ``python -m sglang.launch_server`` resolves to a stand-in
package put first on PYTHONPATH for the child only: it parses the same basic flags and serves
:class:`~sglang_rollout.fake_server.ScriptedEngine` over HTTP until SIGTERM. The GPU check of
the launch path is switched off for these tests only (it is tested in test_plugin.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from sglang_rollout import servers
from sglang_rollout.config import SGLangSection
from sglang_rollout.engine import SGLangEngine
from sglang_rollout.launch import ManagedProcess, flag_list, server_command
from slime_hookspecs import SamplingParams


def test_server_command_places_engines_on_their_gpus() -> None:
    sec = SGLangSection(tp_size=2, base_gpu_id=1, api_key="k", enable_sleep=True,
                        mem_fraction_static=0.7, server_args={"chunked_prefill_size": 4096,
                                                              "enable_metrics": True,
                                                              "disable_radix_cache": False})
    cmd = server_command(sec, model_path="/m", port=31000, nccl_port=31001, engine_index=2,
                         seed=7, tokenizer_path="/tok", trust_remote_code=True)
    assert cmd[:3] == [sys.executable, "-m", "sglang.launch_server"]
    args = cmd[3:]

    def value(flag: str) -> str:
        return args[args.index(flag) + 1]

    assert value("--model-path") == "/m" and value("--host") == "127.0.0.1"
    assert value("--port") == "31000" and value("--nccl-port") == "31001"
    assert value("--tp-size") == "2" and value("--base-gpu-id") == "5"  # 1 + 2 * 2
    assert value("--random-seed") == "9" and value("--tokenizer-path") == "/tok"
    assert value("--mem-fraction-static") == "0.7" and value("--api-key") == "k"
    assert value("--chunked-prefill-size") == "4096"
    for flag in ("--skip-server-warmup", "--trust-remote-code", "--enable-memory-saver",
                 "--enable-metrics"):
        assert flag in args
    assert "--disable-radix-cache" not in args
    assert "--dtype" not in args  # model.dtype "auto": SGLang reads the checkpoint's dtype
    with pytest.raises(ValueError, match="needs a model directory"):
        server_command(SGLangSection(), model_path="", port=1, nccl_port=2, engine_index=0, seed=0)


def test_server_command_generates_in_the_trainers_dtype() -> None:
    cmd = server_command(SGLangSection(), model_path="/m", port=1, nccl_port=2, engine_index=0,
                         seed=0, dtype="float32")
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    own = SGLangSection(server_args={"dtype": "bfloat16"})  # the user's flag wins
    cmd = server_command(own, model_path="/m", port=1, nccl_port=2, engine_index=0, seed=0,
                         dtype="float32")
    assert cmd.count("--dtype") == 1 and cmd[cmd.index("--dtype") + 1] == "bfloat16"


def test_served_dtype_is_the_servers_flag_else_the_rollout_dtype() -> None:
    from sglang_rollout.launch import served_dtype

    assert served_dtype(SGLangSection(), "auto") is None  # the checkpoint's: not known here
    assert served_dtype(SGLangSection(), "bfloat16") == "bfloat16"
    assert served_dtype(SGLangSection(server_args={"dtype": "float16"}), "bfloat16") == "float16"


def test_sglang_env_reaches_the_launched_process(tmp_path: Path) -> None:
    proc = ManagedProcess("printer", [sys.executable, "-c",
                                      "import os; print('seen', os.environ['SLIME_T_ENV'])"],
                          tmp_path / "p.log", extra_env={"SLIME_T_ENV": "here"})
    proc.proc.wait(timeout=30)
    assert "seen here" in (tmp_path / "p.log").read_text()
    with pytest.raises(ValueError, match="env"):
        SGLangSection(env={"A=B": "x"})


def test_flag_list() -> None:
    assert flag_list({"a_b": [1, 2], "c": None, "d": {"x": 1}}) == ["--a-b", "1", "2", "--d", '{"x": 1}']
    with pytest.raises(ValueError, match="sglang.server_args: key '--tp' must be an option name"):
        flag_list({"--tp": 2})


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``sglang.launch_server`` stand-in on the children's PYTHONPATH; GPU check off."""
    pkg = tmp_path / "fake_site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("from sglang_rollout.fake_server import main\nmain()\n")
    plugin_root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([str(tmp_path / "fake_site"), plugin_root, os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setattr(servers, "launch_unavailable_reason", lambda *a, **k: None)
    return tmp_path


def _config(resolve, tmp_path: Path, num_engines: int = 1, rollout: dict[str, Any] | None = None,
            **sglang: Any) -> Any:
    _, config = resolve({
        "run": {"run_dir": str(tmp_path / "run"), "seed": 3},
        "model": {"path": str(tmp_path / "model"), "dtype": "float32"},
        "rollout": {"engine": "sglang", "num_engines": num_engines, **(rollout or {})},
        "sglang": {"startup_timeout_s": 60, **sglang},
    })
    return config


def test_launch_two_engines_serve_log_and_stop(fake_sglang, resolve, tmp_path) -> None:
    config = _config(resolve, tmp_path, num_engines=2)
    engines = [SGLangEngine(config, i) for i in range(2)]
    try:
        procs = [e.servers.proc for e in engines]
        assert all(p is not None and p.alive() for p in procs)
        assert engines[0].url != engines[1].url
        for i, e in enumerate(engines):
            out = e.generate([[10 * i]], [SamplingParams(max_new_tokens=2)])[0]
            assert out.token_ids == [10 * i + 1, 10 * i + 2]
            assert e.health()
        log0 = (tmp_path / "run" / "sglang" / "engine_0.log").read_text()
        assert "-m sglang.launch_server --model-path" in log0 and "--base-gpu-id 0" in log0
        assert "fake sglang serving" in log0
        assert "--base-gpu-id 1" in (tmp_path / "run" / "sglang" / "engine_1.log").read_text()
    finally:
        for e in engines:
            e.shutdown()
    assert all(p.proc.poll() is not None for p in procs)
    assert "stopped on SIGTERM" in (tmp_path / "run" / "sglang" / "engine_0.log").read_text()
    assert engines[0].health() is False


def test_a_launched_server_serves_in_the_rollout_dtype(fake_sglang, resolve, tmp_path) -> None:
    """fp32 training, bf16 serving: rollout.dtype, not model.dtype, is the server's --dtype."""
    engine = SGLangEngine(_config(resolve, tmp_path, rollout={"dtype": "bfloat16"}), 0)
    try:
        log = (tmp_path / "run" / "sglang" / "engine_0.log").read_text()
        assert "--dtype bfloat16" in log and "--dtype float32" not in log
    finally:
        engine.shutdown()


def test_readiness_waits_for_health_generate(fake_sglang, resolve, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_STARTUP_DELAY", "1.5")
    engine = SGLangEngine(_config(resolve, tmp_path), 0)
    try:
        assert engine.health()
    finally:
        engine.shutdown()


def test_a_server_that_dies_at_start_is_reported_with_its_log(fake_sglang, resolve, tmp_path,
                                                               monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_CRASH", "no GPU for you")
    with pytest.raises(RuntimeError, match=r"exited with code 1 before GET /health_generate"
                                           r"(.|\n)*crashing on purpose \(no GPU for you\)"):
        SGLangEngine(_config(resolve, tmp_path), 0)


def test_a_known_start_failure_says_what_to_change(fake_sglang, resolve, tmp_path,
                                                  monkeypatch) -> None:
    """The line a real SGLang 0.5.17 logged when asked for fp32 (H100, 2026-12-05) turns into
    the keys to set."""
    monkeypatch.setenv("FAKE_SGLANG_CRASH", "RuntimeError: rmsnorm(at::Tensor&, at::Tensor&, "
                       "at::Tensor&, double, bool)::<lambda()> failed to dispatch data type Float")
    with pytest.raises(RuntimeError, match=r"exited with code 1(.|\n)*\nhint: SGLang's sgl_kernel "
                                           r"has no float32 kernel(.|\n)*"
                                           r"rollout.dtype = \"bfloat16\""):
        SGLangEngine(_config(resolve, tmp_path), 0)


def test_a_server_that_never_gets_ready_is_stopped(fake_sglang, resolve, tmp_path,
                                                   monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_STARTUP_DELAY", "300")
    made: list[ManagedProcess] = []

    class Recorded(ManagedProcess):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(servers, "ManagedProcess", Recorded)
    with pytest.raises(TimeoutError, match=r"did not pass GET /health_generate within 2 s "
                                           r"\(stopped it\)"):
        SGLangEngine(_config(resolve, tmp_path, startup_timeout_s=2), 0)
    assert len(made) == 1 and made[0].proc.poll() is not None


def test_launching_without_sglang_or_cuda_says_why(resolve, tmp_path) -> None:
    from sglang_rollout.probe import launch_unavailable_reason

    why = launch_unavailable_reason()
    if why is None:
        pytest.skip("SGLang can launch on this host")
    with pytest.raises(RuntimeError, match="cannot launch SGLang servers here: " + why.split("(")[0]):
        SGLangEngine(_config(resolve, tmp_path), 0)
    with pytest.raises(ValueError, match="sglang.launch is false"):
        SGLangEngine(_config(resolve, tmp_path, launch=False), 0)
