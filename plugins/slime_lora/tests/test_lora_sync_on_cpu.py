"""Adapter-only weight sync into the local engine, in-process and over disk (full and delta):
what travels, its byte count, and that the engine serves base + this version's delta.

The trainer and the engine are the real ones (``torch`` backend, ``local`` engine), built from
the registries of a resolved config; the adapters' B matrices are set by hand so every
version differs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch


@pytest.fixture
def parts(lora_config, resolve_config, tmp_path) -> Any:
    from slime_core.context import set_manager

    def build(**weights: Any) -> tuple[Any, Any, Any, Any]:
        lora_config["weights"] = {"dir": str(tmp_path / "w"), **weights}
        manager, config = resolve_config(lora_config)
        set_manager(manager)
        reg = manager.registries
        trainer = reg.trainer_backend.get("torch").factory(config, 0, 1, None)
        engine = reg.rollout_engine.get("local").factory(config, 0, None)
        transport = reg.weight_transport.get(config.weights.transport).factory(config, None)
        return config, trainer, engine, transport

    return build


def _lora_layers(model: torch.nn.Module) -> dict[str, Any]:
    from peft.tuners.lora import LoraLayer

    return {n: m for n, m in model.named_modules() if isinstance(m, LoraLayer)}


def _expected(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """peft's own merge: base weight + ``get_delta_weight`` of each LoRA layer."""
    return {f"{n}.weight": (m.base_layer.weight + m.get_delta_weight("default")).detach()
            for n, m in _lora_layers(model).items()}


def _new_version(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in _lora_layers(model).values():
            b = m.lora_B["default"].weight
            b.copy_(torch.randn(b.shape, generator=g) * 0.1)


def test_only_adapters_train_and_the_reference_is_the_base(parts) -> None:
    from slime_core.api import load_causal_lm

    config, trainer, _, _ = parts()
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    stepped = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert stepped == {id(p) for p in trainer.model.parameters() if p.requires_grad}
    _new_version(trainer.model, 0)
    ref = trainer._ref()
    assert all(p.requires_grad for n, p in trainer.model.named_parameters() if "lora_" in n)
    base = load_causal_lm(config.model, "cpu", torch.float32, seed=config.run.seed)
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        assert torch.equal(ref(input_ids=ids).logits, base(input_ids=ids).logits)
        assert not torch.allclose(trainer.model(input_ids=ids).logits, base(input_ids=ids).logits)


@pytest.mark.parametrize("transport", ["inprocess", "disk"])
def test_adapter_sync_merges_base_plus_this_versions_delta(parts, transport) -> None:
    config, trainer, engine, sender = parts(transport=transport)
    before = engine.state_dict()
    sizes = []
    for version in (1, 2, 3):
        _new_version(trainer.model, version)
        weights = trainer.export_weights()
        assert weights and all(".lora_A." in n or ".lora_B." in n for n in weights)
        adapter_bytes = sum(t.numel() * t.element_size() for t in weights.values())
        stats = sender.send(weights, version, [engine])
        sizes.append(stats["bytes"])
        if transport == "inprocess":
            assert stats["bytes"] == adapter_bytes
        served = engine.state_dict()
        expected = _expected(trainer.model)
        for name, w in expected.items():  # base + this version's delta, never accumulated
            torch.testing.assert_close(served[name], w, rtol=0, atol=1e-6)
        for name, w in served.items():
            if name not in expected:
                assert torch.equal(w, before[name]), name  # the rest is the engine's base
        assert engine.weight_version() == version
    full_bytes = sum(t.numel() * t.element_size() for t in before.values())
    assert max(sizes) < full_bytes / 2  # rank 4 of width 32: the tiny model gains little
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        torch.testing.assert_close(engine._model(input_ids=ids).logits,
                                   trainer.model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_disk_delta_of_adapters(parts) -> None:
    """With ``weights.delta`` the disk transport encodes adapter tensors against the previous
    version; the engine still serves base + the current delta."""
    config, trainer, engine, sender = parts(transport="disk", delta="xor")
    for version in (1, 2, 3):
        _new_version(trainer.model, version if version != 3 else 2)  # 3 repeats 2: no change
        stats = sender.send(trainer.export_weights(), version, [engine])
        served = engine.state_dict()
        for name, w in _expected(trainer.model).items():
            torch.testing.assert_close(served[name], w, rtol=0, atol=1e-6)
        # the first version goes in full, then deltas of the adapter tensors only
        assert stats["delta"] == float(version > 1)
        assert stats["full_bytes"] == sum(t.numel() * t.element_size()
                                          for t in trainer.export_weights().values())
    # nothing changed in version 3: a manifest and an empty payload (1.8 kB here)
    assert stats["written_bytes"] < stats["full_bytes"] / 5


def test_engine_refuses_half_an_adapter(parts) -> None:
    _, trainer, engine, sender = parts()
    weights = {k: v for k, v in trainer.export_weights().items() if ".lora_B." not in k}
    with pytest.raises(ValueError, match=r"weight version 1: 'model.layers.0.self_attn.q_proj' "
                                         r"came with only \['lora_A'\]"):
        sender.send(weights, 1, [engine])


def test_engine_adapter_writes_a_peft_directory_peft_loads(parts, tmp_path) -> None:
    """``slime_engine_adapter`` (for engines that serve LoRA themselves, vLLM): rank, alpha,
    targets, and a writer of one sync's tensors as a PEFT directory, which
    ``PeftModel.from_pretrained`` loads onto the base model into the trainer's policy."""
    from peft import PeftModel
    from slime_core.api import get_manager, load_causal_lm

    config, trainer, _, _ = parts()
    spec = get_manager().hook.slime_engine_adapter(config=config)
    assert (spec.rank, spec.alpha) == (4, 8.0)
    assert spec.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                   "up_proj", "down_proj"]
    _new_version(trainer.model, 1)
    weights = trainer.export_weights()
    spec.write(weights, str(tmp_path / "v1"))
    assert sorted(p.name for p in (tmp_path / "v1").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"]
    base = load_causal_lm(config.model, "cpu", torch.float32, seed=config.run.seed)
    served = PeftModel.from_pretrained(base, str(tmp_path / "v1"))
    assert served.peft_config["default"].r == 4
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        torch.testing.assert_close(served(input_ids=ids).logits,
                                   trainer.model(input_ids=ids).logits, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="came with only"):
        spec.write({k: v for k, v in weights.items() if ".lora_B." not in k}, str(tmp_path / "h"))
    with pytest.raises(ValueError, match="'model.norm.weight' is not a LoRA adapter tensor"):
        spec.write({"model.norm.weight": torch.ones(3)}, str(tmp_path / "n"))
    assert not (tmp_path / "h").exists() and not (tmp_path / "n").exists()


def test_engine_adapter_is_none_without_lora(lora_config, resolve_config) -> None:
    from slime_core.context import set_manager

    lora_config["lora"]["enabled"] = False
    manager, config = resolve_config(lora_config)
    set_manager(manager)
    assert manager.hook.slime_engine_adapter(config=config) is None
