"""The ``[lora]`` config section and its cross-section checks (torch-free).

Target presets for the Llama/Qwen family (module names as in ``transformers``' Llama, Qwen2,
Qwen3, Mistral and SmolLM2 decoders):

* ``attention``: ``q_proj, k_proj, v_proj, o_proj``;
* ``attention_mlp``: those plus ``gate_proj, up_proj, down_proj`` (the default; QLoRA's
  finding that every linear layer of a block should be adapted);
* ``all_linear``: every ``torch.nn.Linear`` of the decoder except the output head (peft's
  ``"all-linear"``), for architectures whose names differ.

Any other entry of ``target_modules`` is a module-name suffix as peft reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PRESETS: dict[str, list[str]] = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "attention_mlp": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                      "down_proj"],
}
ALL_LINEAR = "all_linear"
BACKENDS = ("torch",)  # trainer backends that train adapters
# why a known engine without RolloutEngineRecord.lora_adapters cannot take adapter syncs
# (local, vllm and sglang all take them now)
ENGINE_REASONS: dict[str, str] = {}


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {msg}")


@dataclass
class LoraSection:
    # train LoRA adapters instead of every weight (off by default: an installed plugin is
    # autoloaded into runs that did not ask for it)
    enabled: bool = False
    rank: int = 16  # r: the adapters' inner dimension
    alpha: float = 32.0  # lora_alpha: the update is scaled by alpha / rank
    dropout: float = 0.0  # lora_dropout on the adapter's input while training
    # presets attention | attention_mlp | all_linear, or module-name suffixes (q_proj, ...)
    target_modules: list[str] = field(default_factory=lambda: ["attention_mlp"])
    # a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) to start
    # from; its rank, alpha and targets replace the ones above
    init_adapter: str = ""
    # at the end of the run, the base with the final adapters merged in, as a Hugging Face
    # model under <run_dir>/merged_model
    export_merged: bool = False

    def __post_init__(self) -> None:
        _need(self.rank > 0, "lora.rank", f"must be > 0, got {self.rank}")
        _need(self.alpha > 0, "lora.alpha", f"must be > 0, got {self.alpha}")
        _need(0.0 <= self.dropout < 1.0, "lora.dropout", f"must be in [0, 1), got {self.dropout}")
        _need(bool(self.target_modules), "lora.target_modules",
              f"name at least one module or a preset ({', '.join([*PRESETS, ALL_LINEAR])})")
        if ALL_LINEAR in self.target_modules:
            _need(len(self.target_modules) == 1, "lora.target_modules",
                  f"{ALL_LINEAR!r} already names every linear layer; give it alone")

    def peft_targets(self) -> list[str] | str:
        """``target_modules`` as peft's ``LoraConfig`` takes it (presets expanded)."""
        if self.target_modules == [ALL_LINEAR]:
            return "all-linear"
        out: list[str] = []
        for name in self.target_modules:
            out.extend(PRESETS.get(name, [name]))
        return list(dict.fromkeys(out))

    def scaling(self) -> float:
        """What the adapters' product is multiplied by (peft's ``lora_alpha / r``)."""
        return float(self.alpha) / int(self.rank)


def active(config: Any) -> bool:
    """A run with this plugin's section and ``lora.enabled``."""
    lora = getattr(config, "lora", None)
    return lora is not None and bool(lora.enabled)


def check_combinations(config: Any) -> None:
    """Refuse settings LoRA cannot honour, naming the keys (``slime_configure``, before any
    model loads)."""
    backend = config.train.backend
    if backend not in BACKENDS:
        reason = {
            "megatron": "megatron-core's GPTModel is not a Hugging Face module peft can wrap, "
                        "and its tensor-parallel shards would need LoRA layers split the same "
                        "way (Megatron-Bridge's LoRA); not built yet",
        }.get(backend, "slime_lora wraps the torch backend's Hugging Face model only")
        raise ValueError(f"lora.enabled with train.backend = {backend!r}: {reason}. Use "
                         f"train.backend = 'torch' or turn lora.enabled off")
    check_engine(config.rollout.engine)
    if config.train.ref_update_interval:
        raise ValueError("lora.enabled with train.ref_update_interval: the reference is the base "
                         "model with the adapters turned off, there is no separate copy to move; "
                         "set train.ref_update_interval = 0")
    if config.train.keep_old_actor:
        raise ValueError("lora.enabled with train.keep_old_actor: the old-actor snapshots copy "
                         "the whole model's weights, not adapters; not supported yet")
    if config.weights.verify:
        raise ValueError("lora.enabled with weights.verify: the check compares the engine's "
                         "tensors with the sent ones by name, and the engines receive adapters "
                         "they merge into other tensors; set weights.verify = false")


def check_engine(name: str) -> None:
    """Refuse a rollout engine whose record does not apply adapter-only weight syncs
    (``RolloutEngineRecord.lora_adapters``); an unknown name is left to the core's error."""
    from slime_core.api import UnknownRecordError, get_registries

    try:
        record = get_registries().rollout_engine.get(name, require_available=False)
    except UnknownRecordError:
        return
    if record.lora_adapters:
        return
    able = sorted(r.name for r in get_registries().rollout_engine if r.lora_adapters)
    reason = ENGINE_REASONS.get(name, f"the engine's record (plugin {record.owner}) does not "
                                      "say it applies adapter-only weight syncs "
                                      "(RolloutEngineRecord.lora_adapters)")
    raise ValueError(f"lora.enabled with rollout.engine = {name!r}: weight syncs carry only the "
                     f"LoRA adapter, and {reason}. Use rollout.engine = "
                     f"{' or '.join(repr(n) for n in able) or 'local'}")
