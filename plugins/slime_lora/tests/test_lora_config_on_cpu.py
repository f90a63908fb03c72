"""Bad ``[lora]`` input fails while the config resolves: before any model loads, nothing
written, and the message names what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch


def _adapter(tmp_path: Path, init: dict[str, Any], **lora: Any) -> Path:
    """A real PEFT adapter directory for a model built from ``init`` (saved by peft)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    init = dict(init)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(init.pop("model_type"), **init))
    peft_model = get_peft_model(model, LoraConfig(
        r=lora.pop("r", 4), lora_alpha=lora.pop("lora_alpha", 8),
        target_modules=lora.pop("target_modules", ["q_proj", "v_proj"]), **lora))
    out = tmp_path / "adapter"
    peft_model.save_pretrained(out)
    return out


def test_megatron_backend_is_refused_with_the_reason(lora_config, resolve_config) -> None:
    lora_config["train"]["backend"] = "megatron"
    with pytest.raises(ValueError, match="train.backend = 'megatron'.*GPTModel is not a Hugging "
                                         "Face module peft can wrap"):
        resolve_config(lora_config)
    assert not Path(lora_config["run"]["run_dir"]).exists()  # nothing written


def test_missing_target_lists_the_models_linear_layers(lora_config, resolve_config) -> None:
    lora_config["lora"]["target_modules"] = ["q_proj", "qkv_proj"]
    with pytest.raises(ValueError, match=r"qkv_proj not found among the linear layers of "
                                         r"model.init_config \(Qwen2ForCausalLM\): q_proj \(x2\), "
                                         r"k_proj \(x2\).*down_proj \(x2\); e.g. "
                                         r"model.layers.0.self_attn.q_proj"):
        resolve_config(lora_config)


def test_presets_expand_and_all_linear(lora_config, resolve_config) -> None:
    lora_config["lora"]["target_modules"] = ["attention", "down_proj"]
    _, config = resolve_config(lora_config)
    assert config.lora.peft_targets() == ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]
    lora_config["lora"]["target_modules"] = ["all_linear", "q_proj"]
    with pytest.raises(ValueError, match="'all_linear' already names every linear layer"):
        resolve_config(lora_config)


def test_layer_peft_cannot_wrap_is_refused_with_peft_reason() -> None:
    from slime_lora.config import LoraSection
    from slime_lora.validate import check_wrappable

    class Odd(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(4)

    with pytest.raises(ValueError, match=r"peft cannot add LoRA layers to a toy \(Odd\): .*"
                                         r"LayerNorm"):
        check_wrappable(Odd(), LoraSection(), ["norm"], "a toy")


def test_adapter_of_another_base_names_the_mismatch(lora_config, resolve_config,
                                                    tmp_path: Path) -> None:
    other = {**lora_config["model"]["init_config"], "hidden_size": 64}
    lora_config["lora"]["init_adapter"] = str(_adapter(tmp_path, other))
    with pytest.raises(ValueError, match=r"does not fit model.init_config: lora_A of "
                                         r"'model.layers.0.self_attn.q_proj' is \[4, 64\], the "
                                         r"model's layer takes 32 inputs"):
        resolve_config(lora_config)
    assert not Path(lora_config["run"]["run_dir"]).exists()


def test_init_adapter_sets_rank_alpha_targets(lora_config, resolve_config,
                                              tmp_path: Path) -> None:
    path = _adapter(tmp_path, lora_config["model"]["init_config"], r=2, lora_alpha=3)
    lora_config["lora"]["init_adapter"] = str(path)
    _, config = resolve_config(lora_config)
    assert (config.lora.rank, config.lora.alpha) == (2, 3.0)
    assert config.lora.target_modules == ["q_proj", "v_proj"]


def test_dora_adapter_is_refused(lora_config, resolve_config, tmp_path: Path) -> None:
    path = _adapter(tmp_path, lora_config["model"]["init_config"])
    cfg = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    lora_config["lora"]["init_adapter"] = str(path)
    with pytest.raises(ValueError, match="uses use_dora; slime_lora trains and merges plain LoRA"):
        resolve_config(lora_config)


@pytest.mark.parametrize("section,key,value,match", [
    ("train", "ref_update_interval", 2, "there is no separate copy to move"),
    ("weights", "verify", True, "set weights.verify = false"),
    ("lora", "rank", 0, "lora.rank: must be > 0"),
])
def test_settings_lora_cannot_honour(lora_config, resolve_config, section, key, value,
                                     match) -> None:
    lora_config.setdefault(section, {})[key] = value
    with pytest.raises(ValueError, match=match):
        resolve_config(lora_config)


def test_disabled_section_changes_nothing(lora_config, resolve_config) -> None:
    """An autoloaded slime_lora leaves runs without ``lora.enabled`` alone."""
    lora_config["lora"] = {"target_modules": ["no_such_layer"]}
    lora_config["train"]["backend"] = "torch"
    _, config = resolve_config(lora_config)
    assert not config.lora.enabled


def _resolve_with_engines(data, engine: str):
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    data["rollout"]["engine"] = engine
    plugins = ["slime_grpo", "slime_lora", "vllm_rollout", "sglang_rollout"]
    return resolve(PluginSelection(plugins=plugins), None, (), data, check_names=False)


@pytest.mark.parametrize("engine,match", [
    ("replay", r"plugin core_observe\) does not say it applies adapter-only weight syncs"),
])
def test_engines_that_cannot_apply_adapters_are_refused(lora_config, engine, match) -> None:
    with pytest.raises(ValueError, match=match) as err:
        _resolve_with_engines(lora_config, engine)
    assert "Use rollout.engine = 'local' or 'sglang' or 'vllm'" in str(err.value)
    assert not (Path(lora_config["run"]["run_dir"])).exists()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_vllm_and_sglang_engines_are_accepted(lora_config, engine) -> None:
    """The vllm and sglang records apply adapter syncs (``lora_adapters``; served as vLLM /
    SGLang LoRA adapters: ``plugins/vllm_rollout/tests/test_vllm_lora.py``,
    ``plugins/sglang_rollout/tests/test_lora.py``)."""
    _, config = _resolve_with_engines(lora_config, engine)
    assert config.rollout.engine == engine and config.lora.enabled
