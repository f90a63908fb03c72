"""``bench/gpu_anchor.py``'s SGLang variants (issue 42 item 3), checked on a CPU.

The device runs them against a real SGLang server (``bash bench/h200_sglang.sh run anchor``);
here: the saved model directory holds exactly the weights ``model.init_config`` builds (so the
server, which needs a directory, and the trainer start from the anchor's weights), the
variants' configs resolve with this plugin, and a ``--smoke`` run of the ``sglang`` variant
goes through a launched stand-in ``sglang.launch_server`` (first on the server's PYTHONPATH
through ``sglang.env``, as the device script gives SGLang its own packages) that serves the
core's ``LocalEngine`` from ``--model-path``: its log-probs must equal the trainer's.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def anchor() -> ModuleType:
    if not (BENCH / "gpu_anchor.py").exists():
        pytest.skip("bench/gpu_anchor.py is not in this checkout")
    sys.path.insert(0, str(BENCH))  # gpu_anchor imports bench_plugin beside it
    try:
        spec = importlib.util.spec_from_file_location("gpu_anchor_under_test",
                                                      BENCH / "gpu_anchor.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def _logprobs(model: Any, ids: list[int]) -> Any:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits.float()
    return torch.log_softmax(logits, -1)[0, :-1].gather(-1, torch.tensor(ids[1:])[:, None])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_saved_directory_holds_the_init_config_weights(anchor, tmp_path, dtype) -> None:
    import torch
    from slime_core.models.loading import load_causal_lm, load_tokenizer

    out = anchor.save_anchor_model(tmp_path, smoke=True, dtype=dtype)
    torch_dtype = getattr(torch, dtype)
    cfg = anchor.anchor_model_config(smoke=True)
    saved = load_causal_lm(SimpleNamespace(path=str(out), init_config={}, trust_remote_code=False),
                           "cpu", torch_dtype)
    built = load_causal_lm(SimpleNamespace(path="", init_config=cfg, trust_remote_code=False),
                           "cpu", torch_dtype, seed=anchor.SEED)
    a, b = saved.state_dict(), built.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == torch_dtype and torch.equal(a[name], b[name]), name
    ids = [5, 17, 300, 42, 999, 3, 7]
    assert torch.equal(_logprobs(saved, ids), _logprobs(built, ids))
    # the comparison can fail: another seed builds other weights
    other = load_causal_lm(SimpleNamespace(path="", init_config=cfg, trust_remote_code=False),
                           "cpu", torch_dtype, seed=anchor.SEED + 1)
    assert not torch.equal(other.state_dict()["model.embed_tokens.weight"],
                           a["model.embed_tokens.weight"])
    # written once: a second call keeps the directory; another dtype rewrites it
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert anchor.save_anchor_model(tmp_path, smoke=True, dtype=dtype) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    flip = "bfloat16" if dtype == "float32" else "float32"
    anchor.save_anchor_model(tmp_path, smoke=True, dtype=flip)
    assert json.loads((out / "slime_anchor.json").read_text())["dtype"] == flip
    assert (out / "model.safetensors").stat().st_mtime_ns != stamp
    # the variants' model table loads the anchor's tokenizer (a bare model.path would load
    # the copy in the directory as Qwen2Tokenizer, with other ids: see save_anchor_model)
    table = anchor.variant_data("saved_local", tmp_path, tmp_path / "run", 1, smoke=True)["model"]
    tok = load_tokenizer(SimpleNamespace(trust_remote_code=False, **table))
    ref = load_tokenizer(SimpleNamespace(tokenizer=str(tmp_path / "tokenizer"), path="",
                                         trust_remote_code=False))
    text = "Question 3: what is 3 plus 8? Answer:"
    assert tok(text)["input_ids"] == ref(text)["input_ids"] and tok.eos_token == "<eos>"
    assert (out / "tokenizer.json").read_bytes() == (tmp_path / "tokenizer" / "tokenizer.json").read_bytes()


SETS = ('server_args={attention_backend = "triton", disable_prefill_cuda_graph = true}',
        "mem_fraction_static=0.3", "startup_timeout_s=300", 'log_dir="/tmp/out/logs"',
        'env={PYTHONPATH = "/tmp/sgl/tf:/tmp/sgl/site"}')


def test_sglang_variants_resolve_with_the_plugin(anchor, tmp_path) -> None:
    from slime_core.session import resolve

    configs = {}
    for name in ("saved_local", "sglang", "sglang_disk", "eager"):
        data = anchor.variant_data(name, tmp_path, tmp_path / name, 3, smoke=True)
        _, configs[name] = resolve(  # as gpu_anchor's worker resolves it
            anchor.plugin_selection(anchor.variant_plugins(name)), None,
            anchor.sglang_overrides(name, SETS), data)
    saved = str(tmp_path / "model_0.5b_smoke")
    sgl, local = configs["sglang"], configs["saved_local"]
    assert sgl.rollout.engine == "sglang" and sgl.weights.transport == "inprocess"
    assert configs["sglang_disk"].weights.transport == "disk"
    assert sgl.model.path == saved and not sgl.model.init_config
    assert sgl.sglang.env == {"PYTHONPATH": "/tmp/sgl/tf:/tmp/sgl/site"}
    assert sgl.sglang.server_args == {"attention_backend": "triton",
                                      "disable_prefill_cuda_graph": True}
    assert sgl.sglang.mem_fraction_static == 0.3 and sgl.sglang.startup_timeout_s == 300
    assert sgl.sglang.log_dir == "/tmp/out/logs"
    # the local side of the comparison: same directory, same training, local engine
    assert local.rollout.engine == "local" and local.model.path == saved
    assert local.train == sgl.train and local.run.seed == sgl.run.seed
    assert "sglang" not in local  # no plugin, no section: --sglang-set is not applied to it
    # the existing variants keep building from init_config
    eager = configs["eager"]
    assert not eager.model.path and eager.model.init_config["hidden_size"] == 64
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        anchor.sglang_overrides("sglang", ["mem_fraction_static"])


LAUNCH_SERVER = '''\
"""Stand-in sglang.launch_server: the core's LocalEngine on --model-path, SGLang's HTTP API."""
import argparse, signal, threading
from slime_core.testing import build_test_config
from slime_std.engine.local_engine import LocalEngine
from sglang_rollout.fake_server import FakeSGLangServer

ap = argparse.ArgumentParser()
for flag in ("--model-path", "--host", "--dtype"):
    ap.add_argument(flag)
ap.add_argument("--port", type=int)
ap.add_argument("--random-seed", type=int, default=0)
args, ignored = ap.parse_known_args()
cfg = build_test_config(model={"path": args.model_path, "dtype": args.dtype},
                        run={"seed": args.random_seed})
server = FakeSGLangServer(LocalEngine(cfg, 0), host=args.host, port=args.port).start()
print(f"stand-in serving {args.model_path} at {server.url}; ignored: {ignored}", flush=True)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
done.wait()
server.stop()
'''


@pytest.mark.parametrize("variant", ["sglang", "sglang_disk"])
def test_smoke_run_through_a_launched_stand_in(anchor, tmp_path, monkeypatch, variant) -> None:
    import torch.multiprocessing
    from sglang_rollout import plugin, servers

    site = tmp_path / "sgl_site" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "launch_server.py").write_text(LAUNCH_SERVER)
    # no CUDA here: the launch probe would refuse (tested in test_plugin.py)
    monkeypatch.setattr(plugin, "launch_unavailable_reason", lambda *a, **k: None)
    monkeypatch.setattr(servers, "launch_unavailable_reason", lambda *a, **k: None)
    logs = tmp_path / "logs"
    sets = ("startup_timeout_s=120", f'log_dir="{logs}"',
            f'env={{PYTHONPATH = "{site.parent}"}}', "mem_fraction_static=0.3")
    was = torch.multiprocessing.get_sharing_strategy()
    if variant == "sglang":
        # /update_weights_from_tensor across processes with CPU tensors: torch's default
        # sharing passes file descriptors through a socket that only the sender's children
        # may open ("digest received was wrong" in the server); shared-memory file names
        # work in any process. On the device the tensors are CUDA ones (CUDA IPC handles).
        torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        res = anchor.worker(variant, tmp_path / "work", steps=1, warmup=1, smoke=True,
                            sglang_set=sets)
    finally:
        torch.multiprocessing.set_sharing_strategy(was)
    log = (logs / "engine_0.log").read_text()
    assert "stand-in serving" in log and str(tmp_path / "work" / "model_0.5b_smoke") in log
    assert "--mem-fraction-static 0.3" in log and "--dtype float32" in log
    assert f"--tokenizer-path {tmp_path / 'work' / 'tokenizer'}" in log
    assert res["engine"] == "sglang" and len(res["walls"]) == 2
    assert res["response_tokens"] == [2 * 8 * 8] * 2  # every row forced to max_new_tokens
    # the server generated with the trainer's weights, before and after each sync
    mismatch = [m for m in res["mismatch"] if m is not None]
    assert len(mismatch) == 2 and max(mismatch) < 1e-4, mismatch
    summary = anchor.summarize(res, {"bf16_tflops": 1.0, "copy_bytes_per_s": 1e10}, 1)
    assert summary["engine"] == "sglang" and summary["rollout_tok_per_s"] > 0
