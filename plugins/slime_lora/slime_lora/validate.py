"""Checks that need the model's shape but not its weights, run in ``slime_configure``.

The model is built on the ``meta`` device from its ``config.json`` (or ``model.init_config``):
no weight is read or allocated, so a bad ``[lora]`` fails in a second, before anything loads
and before the run directory is written.
"""

from __future__ import annotations

import json
import os
from typing import Any, cast

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def meta_model(model_cfg: Any) -> Any:
    """The ``[model]`` section's causal LM on the meta device (shapes, no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    trust = bool(model_cfg.trust_remote_code)
    if model_cfg.path:
        if not os.path.isfile(os.path.join(model_cfg.path, "config.json")):
            raise FileNotFoundError(f"model.path: {model_cfg.path!r} has no config.json")
        hf_config = AutoConfig.from_pretrained(model_cfg.path, trust_remote_code=trust)
    elif model_cfg.init_config:
        init = dict(model_cfg.init_config)
        hf_config = AutoConfig.for_model(init.pop("model_type", ""), **init)
    else:
        raise ValueError("lora: no model to adapt: set model.path or model.init_config")
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf_config, trust_remote_code=trust)


def linear_names(model: Any) -> list[str]:
    """Names of the model's ``torch.nn.Linear`` modules, the output head excepted."""
    import torch

    head = model.get_output_embeddings()
    return [n for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not head]


def _describe(names: list[str]) -> str:
    """The linear layers by kind (``q_proj`` x 2 ...) and one full name as an example."""
    kinds: dict[str, int] = {}
    for n in names:
        kinds[n.rsplit(".", 1)[-1]] = kinds.get(n.rsplit(".", 1)[-1], 0) + 1
    listed = ", ".join(f"{k} (x{v})" for k, v in kinds.items())
    return f"{listed}; e.g. {names[0]}" if names else "none"


def check_targets(model: Any, targets: list[str] | str, where: str) -> None:
    """Every target suffix names a linear layer of ``model``; else an error listing them."""
    names = linear_names(model)
    if targets == "all-linear":
        if not names:
            raise ValueError(f"lora.target_modules = all_linear: {where} has no linear layer "
                             "besides its output head")
        return
    missing = [t for t in targets
               if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        raise ValueError(
            f"lora.target_modules: {', '.join(missing)} not found among the linear layers of "
            f"{where} ({type(model).__name__}): {_describe(names)}")


def peft_alpha(alpha: float) -> Any:
    """``lora.alpha`` as peft takes it: peft annotates ``lora_alpha`` as ``int`` but uses it as
    a number (scaling = alpha / r), and a float alpha such as 16.5 is valid; typed ``Any`` so
    mypy with peft installed accepts it."""
    return float(alpha)


def check_wrappable(model: Any, lora: Any, targets: list[str] | str, where: str) -> None:
    """peft's own verdict, on the meta model: an architecture or layer type it cannot wrap
    fails here with peft's reason."""
    from peft import LoraConfig, get_peft_model

    try:
        get_peft_model(model, LoraConfig(r=int(lora.rank), lora_alpha=peft_alpha(lora.alpha),
                                         target_modules=targets, lora_dropout=0.0))
    except (ValueError, TypeError, NotImplementedError, KeyError) as exc:
        raise ValueError(f"lora: peft cannot add LoRA layers to {where} "
                         f"({type(model).__name__}): {exc}") from exc


def read_adapter_config(path: str) -> dict[str, Any]:
    """``adapter_config.json`` of a PEFT LoRA adapter directory, checked for what the engines'
    merge supports (plain LoRA: one rank and alpha, no DoRA, no rsLoRA, no extra modules)."""
    cfg_file = os.path.join(path, ADAPTER_CONFIG)
    if not os.path.isfile(cfg_file) or not os.path.isfile(os.path.join(path, ADAPTER_WEIGHTS)):
        raise FileNotFoundError(f"lora.init_adapter: {path!r} is not a PEFT adapter directory "
                                f"(needs {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    with open(cfg_file) as fh:
        cfg = json.load(fh)
    where = f"lora.init_adapter {path!r}"
    if cfg.get("peft_type") != "LORA":
        raise ValueError(f"{where}: peft_type is {cfg.get('peft_type')!r}, not 'LORA'")
    unsupported = [k for k in ("use_dora", "use_rslora") if cfg.get(k)]
    unsupported += [k for k in ("rank_pattern", "alpha_pattern") if cfg.get(k)]
    if cfg.get("modules_to_save"):
        unsupported.append("modules_to_save")
    if unsupported:
        raise ValueError(f"{where}: uses {', '.join(unsupported)}; slime_lora trains and merges "
                         "plain LoRA (one rank and alpha, adapter tensors only)")
    return cfg


def check_adapter_shapes(model: Any, path: str, model_where: str) -> None:
    """Each adapter tensor sits on a linear layer of ``model`` with matching sizes; the first
    mismatch names the layer, both shapes and both base models."""
    from safetensors import safe_open

    modules = dict(model.named_modules())
    with open(os.path.join(path, ADAPTER_CONFIG)) as fh:
        base_name = json.load(fh).get("base_model_name_or_path")
    where = (f"lora.init_adapter {path!r} (trained on {base_name!r}) does not fit "
             f"{model_where}")
    with safe_open(os.path.join(path, ADAPTER_WEIGHTS), framework="pt") as fh:
        for key in fh.keys():
            shape = list(fh.get_slice(key).get_shape())
            module, kind = _split_key(key)
            layer = modules.get(module)
            if layer is None or not hasattr(layer, "in_features"):
                raise ValueError(f"{where}: it adapts {module!r}, which the model lacks")
            want = ([shape[0], layer.in_features] if kind == "lora_A"
                    else [layer.out_features, shape[1]])
            if shape != want:
                raise ValueError(f"{where}: {kind} of {module!r} is {shape}, the model's layer "
                                 f"takes {layer.in_features} inputs and gives "
                                 f"{layer.out_features} outputs")


def _split_key(key: str) -> tuple[str, str]:
    """``base_model.model.<module>.lora_A.weight`` -> (``<module>``, ``lora_A``)."""
    for kind in ("lora_A", "lora_B"):
        marker = f".{kind}."
        if marker in key:
            module = key.split(marker, 1)[0].removeprefix("base_model.model.")
            return module, kind
    raise ValueError(f"lora.init_adapter: tensor {key!r} is not a LoRA A/B weight")


def check_config(config: Any) -> None:
    """Everything knowable before the model loads; adopts an init adapter's rank, alpha and
    targets into ``config.lora`` (workers receive the adjusted config)."""
    lora = config.lora
    where = f"model.path {config.model.path!r}" if config.model.path else "model.init_config"
    if lora.init_adapter:
        cfg = read_adapter_config(lora.init_adapter)
        targets = cfg.get("target_modules")
        lora.rank, lora.alpha = int(cfg["r"]), float(cfg["lora_alpha"])
        lora.dropout = float(cfg.get("lora_dropout") or 0.0)
        lora.target_modules = ([targets] if isinstance(targets, str) else sorted(cast(Any, targets)))
    model = meta_model(config.model)
    targets = lora.peft_targets()
    check_targets(model, targets, where)
    if lora.init_adapter:
        check_adapter_shapes(model, lora.init_adapter, where)
    check_wrappable(model, lora, targets, where)
