"""LoRA runs on the sglang engine against the stand-in server (:mod:`sglang_rollout.fake_server`
with SGLang 0.5.17's LoRA endpoints) over the core's ``LocalEngine``, so log-probs are real.

The trainer is the real one (``torch`` backend with slime_lora's peft model); each sync's
adapter goes through ``slime_engine_adapter``'s PEFT writer, ``/load_lora_adapter`` and
``/unload_lora_adapter``, and ``/generate`` names it in ``lora_path``. What this cannot show
(SGLang's own LoRA kernels and loader) is in the plugin README.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("peft")


@pytest.fixture
def lora_parts(base_config, fake_server, resolve, tmp_path) -> Any:
    """``build(**sglang)`` -> (trainer, sglang engine, stand-in server)."""
    from slime_core.context import set_manager
    from slime_core.testing import build_test_config
    from slime_std.engine.local_engine import LocalEngine

    made: list[Any] = []

    def build(**server: Any) -> tuple[Any, Any, Any]:
        served = LocalEngine(build_test_config(model=dict(base_config["model"]),
                                               run={"seed": 1}), 0)
        srv = fake_server(served, enable_lora=True, max_lora_rank=4,
                          lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                               "gate_proj", "up_proj", "down_proj"],
                          max_loaded_loras=2, **server)
        data = dict(base_config)
        data["run"] = {**data["run"], "seed": 1}
        data["rollout"] = {**data["rollout"], "engine": "sglang"}
        data["sglang"] = {"urls": [srv.url], "lora_dir": str(tmp_path / "adapters")}
        data["lora"] = {"enabled": True, "rank": 4, "alpha": 8.0}
        manager, config = resolve(data, ("slime_grpo", "slime_lora", "sglang_rollout"))
        set_manager(manager)
        reg = manager.registries
        trainer = reg.trainer_backend.get("torch").factory(config, 0, 1, None)
        engine = reg.rollout_engine.get("sglang").factory(config, 0, None)
        made.append(engine)
        return trainer, engine, srv

    yield build
    for e in made:
        e.shutdown()


def _new_version(model: Any, seed: int) -> None:
    import torch
    from peft.tuners.lora import LoraLayer

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoraLayer):
                b = m.lora_B["default"].weight
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)


def _trainer_log_probs(model: Any, prompt: list[int], tokens: list[int]) -> list[float]:
    import torch

    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


PROMPT = [3, 5, 7, 9, 11]


def _generate(engine: Any) -> Any:
    from slime_hookspecs import SamplingParams

    return engine.generate([PROMPT], [SamplingParams(temperature=1.0, max_new_tokens=6,
                                                     ignore_eos=True, seed=7)])[0]


def test_adapter_syncs_serve_the_trainers_peft_model(lora_parts) -> None:
    """Base before the first sync; then each version's adapter loaded under ``slime-v<N>``, the
    previous one unloaded, ``lora_path`` on every ``/generate``, and the generated log-probs
    equal to the trainer's peft model's (and not the base's)."""
    trainer, engine, srv = lora_parts()
    assert engine.adapter is not None and engine.adapter.name is None
    out0 = _generate(engine)
    with _adapters_off(trainer.model):
        base_lps = _trainer_log_probs(trainer.model, PROMPT, out0.token_ids)
    assert max(abs(a - b) for a, b in zip(out0.log_probs, base_lps, strict=True)) < 1e-4
    assert "lora_path" not in srv.requests[-1].body

    for version in (1, 2):
        _new_version(trainer.model, version)
        engine.update_weights(trainer.export_weights(), version)
        assert srv.loras == {f"slime-v{version}": str(
            Path(engine.adapter.root) / f"slime-v{version}")}
        assert engine.weight_version() == version
        out = _generate(engine)
        assert srv.requests[-1].body["lora_path"] == f"slime-v{version}"
        assert out.weight_version == version
        want = _trainer_log_probs(trainer.model, PROMPT, out.token_ids)
        assert max(abs(a - b) for a, b in zip(out.log_probs, want, strict=True)) < 1e-4
        # the adapter changes what is served: the base scores these tokens differently
        with _adapters_off(trainer.model):
            base = _trainer_log_probs(trainer.model, PROMPT, out.token_ids)
        assert max(abs(a - b) for a, b in zip(out.log_probs, base, strict=True)) > 1e-2
    lora_calls = [(r.path, r.body["lora_name"]) for r in srv.requests
                  if r.path in ("/load_lora_adapter", "/unload_lora_adapter")]
    assert lora_calls == [("/load_lora_adapter", "slime-v1"), ("/load_lora_adapter", "slime-v2"),
                          ("/unload_lora_adapter", "slime-v1")]
    paths = [r.path for r in srv.requests]
    i = paths.index("/load_lora_adapter")
    assert paths[i - 2:i] == ["/pause_generation", "/flush_cache"]
    # only the serving adapter's directory is left
    assert sorted(p.name for p in Path(engine.adapter.root).iterdir()) == ["slime-v2"]


@contextmanager
def _adapters_off(model: Any) -> Iterator[None]:
    """peft's ``disable_adapter()`` on the trainer's (inner) module: the base model."""
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for m in layers:
        m.enable_adapters(False)
    try:
        yield
    finally:
        for m in layers:
            m.enable_adapters(True)


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_failed_load_keeps_the_previous_adapter(lora_parts) -> None:
    import json

    trainer, engine, srv = lora_parts()
    _new_version(trainer.model, 1)
    engine.update_weights(trainer.export_weights(), 1)
    before = _generate(engine)
    answer = json.dumps({"rid": None, "http_worker_ipc": None, "success": False,
                         "error_message": "LoRA adapter slime-v2 with rank 4 is incompatible",
                         "loaded_adapters": {"slime-v1": "x"}})
    srv.fail["/load_lora_adapter"] = (400, answer)
    _new_version(trainer.model, 2)
    with pytest.raises(Exception, match=r"POST /load_lora_adapter answered HTTP 400: .*"
                                        r"slime-v2 with rank 4 is incompatible"):
        engine.update_weights(trainer.export_weights(), 2)
    assert [r.path for r in srv.requests][-1] == "/continue_generation"  # not left paused
    assert list(srv.loras) == ["slime-v1"] and engine.adapter.name == "slime-v1"
    assert engine.weight_version() == 1
    after = _generate(engine)
    assert srv.requests[-1].body["lora_path"] == "slime-v1"
    assert after.token_ids == before.token_ids and after.log_probs == before.log_probs
    assert not (Path(engine.adapter.root) / "slime-v2").exists()
    # a server started without --enable-lora: 400 with SGLang's message
    srv.enable_lora = False
    with pytest.raises(Exception, match=r"/load_lora_adapter.*LoRA is not enabled"):
        engine.update_weights(trainer.export_weights(), 2)
    assert engine.adapter.name == "slime-v1"


def test_disk_transport_and_the_stand_ins_sglang_behaviour(lora_parts, tmp_path) -> None:
    """A version directory (disk transport) is served the same way; the stand-in answers as
    SGLang does for unknown, duplicate and unloaded adapters."""
    trainer, engine, srv = lora_parts()
    _new_version(trainer.model, 1)
    from safetensors.torch import save_file

    vdir = tmp_path / "weights" / "v000001"
    vdir.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in trainer.export_weights().items()},
              str(vdir / "model.safetensors"))
    engine.update_weights_from_disk(str(vdir), 1)
    assert list(srv.loras) == ["slime-v1"]
    out = _generate(engine)
    want = _trainer_log_probs(trainer.model, PROMPT, out.token_ids)
    assert max(abs(a - b) for a, b in zip(out.log_probs, want, strict=True)) < 1e-4

    path = srv.loras["slime-v1"]
    status, body = _post(f"{srv.url}/load_lora_adapter",
                         {"lora_name": "slime-v1", "lora_path": path})
    assert status == 400 and body["success"] is False
    assert "because it is already loaded" in body["error_message"]
    status, body = _post(f"{srv.url}/unload_lora_adapter", {"lora_name": "nope"})
    assert status == 400 and "does not exist" in body["error_message"]
    gen = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}}
    status, body = _post(f"{srv.url}/generate", {**gen, "lora_path": "nope"})
    assert status == 400 and "never been loaded" in body["error"]["message"]
    # SGLang loads an unloaded adapter again from its path when a request names it
    status, body = _post(f"{srv.url}/unload_lora_adapter", {"lora_name": "slime-v1"})
    assert status == 200 and body["loaded_adapters"] == {}
    status, body = _post(f"{srv.url}/generate", {**gen, "lora_path": "slime-v1"})
    assert status == 200 and list(srv.loras) == ["slime-v1"]
    # the broadcast transport writes into base weights: refused in a LoRA run
    with pytest.raises(RuntimeError, match="use weights.transport = disk or inprocess"):
        engine.init_weights_update_group("127.0.0.1", 29500, 1, 2)


def test_launch_flags_and_refusals() -> None:
    from types import SimpleNamespace

    from sglang_rollout.config import SGLangSection
    from sglang_rollout.launch import server_command
    from sglang_rollout.lora import launch_flags

    spec = SimpleNamespace(rank=16, target_modules=["q_proj", "v_proj"])
    cmd = server_command(SGLangSection(server_args={"chunked_prefill_size": 2048}),
                         model_path="/m", port=1, nccl_port=2, engine_index=0, seed=0,
                         extra_args=launch_flags(spec))
    i = cmd.index("--enable-lora")
    assert cmd[i:] == ["--enable-lora", "--max-lora-rank", "16", "--lora-target-modules",
                       "q_proj", "v_proj", "--max-loras-per-batch", "2", "--max-loaded-loras",
                       "2", "--chunked-prefill-size", "2048"]
    assert launch_flags(SimpleNamespace(rank=8, target_modules=["all-linear"]))[3:5] == [
        "--lora-target-modules", "all"]
    with pytest.raises(ValueError, match=r"\['c_attn'\] are not among the ones SGLang serves"):
        launch_flags(SimpleNamespace(rank=8, target_modules=["q_proj", "c_attn"]))


def test_grpo_lora_run_against_the_stand_in(base_config, fake_server, run_in_agreement) -> None:
    """A 2-step GRPO + LoRA run with ``rollout.engine = "sglang"``: the trainer's log-probs of
    every rollout token agree with the served ones (``train/mismatch_abs_logprob_diff``), which
    only holds if each sync's adapter reached the server and every request named it."""
    from slime_core.testing import build_test_config
    from slime_std.engine.local_engine import LocalEngine

    served = LocalEngine(build_test_config(model=dict(base_config["model"]), run={"seed": 1}), 0)
    srv = fake_server(served, enable_lora=True, max_lora_rank=4, max_loaded_loras=2)
    base_config["run"]["seed"] = 1  # the stand-in's base is the trainer's base
    base_config["lora"] = {"enabled": True, "rank": 4, "alpha": 8.0}
    base_config["train"]["lr"] = 1e-2
    run_in_agreement(base_config, srv.url, "disk", ("slime_grpo", "slime_lora", "sglang_rollout"))
    loads = [r.body["lora_name"] for r in srv.requests if r.path == "/load_lora_adapter"]
    unloads = [r.body["lora_name"] for r in srv.requests if r.path == "/unload_lora_adapter"]
    assert loads == ["slime-v0", "slime-v1", "slime-v2"] and unloads == loads[:-1]
    assert list(srv.loras) == ["slime-v2"] and srv.version == "default"  # the base unchanged
    gens = [r.body for r in srv.requests if r.path == "/generate"]
    assert gens and all(g.get("lora_path", "").startswith("slime-v") for g in gens)
