"""Engine side, for engines that serve LoRA themselves (vLLM, SGLang): one sync's adapter
tensors as a PEFT adapter directory.

The trainer syncs the adapter under its own state-dict names
(``model.layers.0.self_attn.q_proj.lora_A.default.weight``); a PEFT directory names the same
tensors ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`` (what peft's
``save_pretrained`` writes and what vLLM's and SGLang's LoRA loaders read) beside an
``adapter_config.json`` written by peft's own ``LoraConfig``. ``target_modules`` there are the
layer kinds the tensors cover, so an ``all_linear`` run names what it adapted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

from slime_hookspecs import EngineAdapter

from slime_lora.merge import split_name
from slime_lora.validate import ADAPTER_WEIGHTS, peft_alpha

PEFT_PREFIX = "base_model.model."


def engine_adapter(config: Any) -> EngineAdapter:
    """The answer of ``slime_engine_adapter`` for a LoRA run."""
    lora = config.lora
    targets = lora.peft_targets()
    return EngineAdapter(
        rank=int(lora.rank), alpha=float(lora.alpha),
        target_modules=[targets] if isinstance(targets, str) else list(targets),
        write=partial(write_adapter_dir, config))


def peft_tensors(weights: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """(PEFT name -> CPU tensor, the adapted layer kinds) for one sync's adapter tensors; a
    tensor that is not a LoRA A/B weight, or a layer with only one of them, is an error."""
    out: dict[str, Any] = {}
    halves: dict[str, set[str]] = {}
    for name, tensor in weights.items():
        split = split_name(name)
        if split is None:
            raise ValueError(f"{where}: {name!r} is not a LoRA adapter tensor (a LoRA run syncs "
                             "lora_A / lora_B weights only)")
        module, kind = split
        halves.setdefault(module, set()).add(kind)
        out[f"{PEFT_PREFIX}{module}.{kind}.weight"] = tensor.detach().to("cpu").contiguous()
    if not out:
        raise ValueError(f"{where}: no adapter tensor arrived")
    for module, kinds in halves.items():
        if kinds != {"lora_A", "lora_B"}:
            raise ValueError(f"{where}: {module!r} came with only {sorted(kinds)}")
    return out, sorted({m.rsplit(".", 1)[-1] for m in halves})


def write_adapter_dir(config: Any, weights: Mapping[str, Any], path: str) -> None:
    """Write ``weights`` (one sync's adapter, trainer names) to ``path`` as a PEFT adapter
    directory: ``adapter_model.safetensors`` + ``adapter_config.json`` (rank, alpha and
    dropout of ``[lora]``, plain LoRA, no bias)."""
    from peft import LoraConfig
    from safetensors.torch import save_file

    lora = config.lora
    tensors, kinds = peft_tensors(weights, f"slime_lora: the adapter written to {path}")
    ranks = {tuple(t.shape)[0] for n, t in tensors.items() if ".lora_A." in n}
    if ranks != {int(lora.rank)}:
        raise ValueError(f"slime_lora: the adapter written to {path} has lora_A ranks "
                         f"{sorted(ranks)}, lora.rank is {lora.rank}")
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, ADAPTER_WEIGHTS), metadata={"format": "pt"})
    LoraConfig(r=int(lora.rank), lora_alpha=peft_alpha(lora.alpha),
               lora_dropout=float(lora.dropout), target_modules=kinds, bias="none",
               task_type="CAUSAL_LM",
               base_model_name_or_path=config.model.path or None).save_pretrained(path)
