"""Trainer side: the policy with LoRA adapters, the reference without them, what is exported.

The policy is the ``[model]`` causal LM wrapped by peft (``get_peft_model``, or
``PeftModel.from_pretrained`` for ``lora.init_adapter``): its base weights are frozen and only
the ``lora_A`` / ``lora_B`` matrices train. The trainer gets peft's *inner* model (the
``transformers`` class itself with LoRA layers injected, ``PeftModel.base_model.model``), so the
backend's Hugging Face paths (the fused log-prob head, ``train.compile``) apply unchanged and
its state-dict names are the usual ones plus ``...q_proj.lora_A.default.weight`` and
``...q_proj.base_layer.weight``.

The reference model (KL) is :class:`AdaptersOff`: the same module with peft's
``disable_adapter()`` around its forward, no second copy of the weights.
"""

from __future__ import annotations

import weakref
from typing import Any, cast

import torch

from slime_lora.config import LoraSection
from slime_lora.validate import peft_alpha

# the peft wrapper is kept on the inner model under this attribute (object.__setattr__: not
# a submodule, so it is neither in the state dict nor moved twice)
PEFT_ATTR = "_slime_lora_peft"
ADAPTER_MARKERS = (".lora_A.", ".lora_B.")

# trainer config (one per rank) -> its policy, for the reference built after it; a weak
# reference, so a finished run's model is freed
_POLICIES: dict[int, weakref.ref[torch.nn.Module]] = {}


def build_policy(config: Any) -> torch.nn.Module:
    """The ``[model]`` causal LM with LoRA adapters, on the CPU (the trainer moves it), its
    base frozen; seeded by the trainer (``torch.manual_seed(run.seed)`` precedes the build),
    so every rank initialises the same ``lora_A``."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from slime_core.api import accelerator_record, load_causal_lm, resolve_dtype

    lora: LoraSection = config.lora
    device_type = accelerator_record(config).device_type
    dtype = resolve_dtype(config.model.dtype, torch.device(device_type, 0)
                          if device_type != "cpu" else torch.device("cpu"))
    base = load_causal_lm(config.model, "cpu", dtype, role="actor", seed=config.run.seed)
    if lora.init_adapter:
        peft_model = PeftModel.from_pretrained(base, lora.init_adapter, is_trainable=True)
    else:
        peft_model = get_peft_model(base, LoraConfig(
            r=int(lora.rank), lora_alpha=peft_alpha(lora.alpha), lora_dropout=float(lora.dropout),
            target_modules=lora.peft_targets(), bias="none", task_type="CAUSAL_LM"))
    # the transformers model itself (peft types the attribute as Tensor | Module)
    inner: Any = peft_model.base_model.model
    if config.train.gradient_checkpointing:
        # the frozen embedding gives checkpointed blocks inputs without grad: ask for it
        inner.enable_input_require_grads()
    object.__setattr__(inner, PEFT_ATTR, peft_model)
    _POLICIES[id(config)] = weakref.ref(inner)
    return inner


def peft_of(model: Any) -> Any:
    """The ``PeftModel`` behind a policy :func:`build_policy` made, else ``None``."""
    return getattr(model, PEFT_ATTR, None)


def policy_for(config: Any) -> torch.nn.Module | None:
    ref = _POLICIES.get(id(config))
    return ref() if ref is not None else None


class AdaptersOff(torch.nn.Module):
    """The reference model of a LoRA run: the policy's forward with its adapters disabled.

    Holds no weights of its own. ``parameters()`` are the policy's (the trainer asks them for
    the device); ``requires_grad_`` and ``train``/``eval`` leave the policy alone, since the
    trainer freezes and switches its reference as if it were a separate copy.
    """

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "_policy", policy)
        self.config = policy.config

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with peft_of(self._policy).disable_adapter():
            return cast(Any, self._policy)(*args, **kwargs)

    def parameters(self, recurse: bool = True) -> Any:  # noqa: D102 - see the class
        return cast(Any, self._policy).parameters(recurse)

    def requires_grad_(self, requires_grad: bool = True) -> AdaptersOff:
        return self  # freezing the reference must not freeze the policy's adapters

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the LoRA reference model has no weights of its own (it is the "
                           "policy with adapters off)")


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's adapter tensors under its own state-dict names."""
    return {k: v for k, v in model.state_dict().items()
            if any(m in k for m in ADAPTER_MARKERS)}


def save_peft(model: torch.nn.Module, path: str) -> None:
    """``adapter_config.json`` + ``adapter_model.safetensors`` in ``path`` (peft's
    ``save_pretrained``), which ``PeftModel.from_pretrained(base, path)`` loads."""
    peft_of(model).save_pretrained(path)
