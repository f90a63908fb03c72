"""``train.fused_norm``: the policy's RMSNorms as one ``torch.nn.functional.rms_norm`` call.

transformers' Llama-family RMSNorm runs five elementwise operations (cast, square, mean,
reciprocal square root, two products), and autograd as many again backwards. A small model's
training step is bound by kernel launches (SmolLM2, H100, 2026-12-05: ~19.6k kernels a step,
the GPU busy 26% of it; 244 launches each of pow, mean and rsqrt), so the norm's chain is a
share of the step. ``F.rms_norm`` is one fused kernel forward on CUDA (and in torch's CPU
forward). The local engine's fused decoder computes its norms the same way, in the same order:
scale after the cast back, as transformers does.

Only modules whose ``forward`` is transformers' Llama RMSNorm, word for word (Qwen2, Qwen3,
Mistral, the MoE families: transformers copies it), are changed; Gemma's ``1 + weight`` form
and any other norm keep their own. Parameters, names and checkpoints are unchanged.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, cast

import torch
import torch.nn.functional as F


@functools.lru_cache(maxsize=1)
def _llama_forward_source() -> str | None:
    try:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
    except ImportError:
        return None
    return inspect.getsource(LlamaRMSNorm.forward)


_CHECKED: dict[type, bool] = {}


def _is_llama_norm(cls: type) -> bool:
    if cls not in _CHECKED:
        ref = _llama_forward_source()
        try:
            _CHECKED[cls] = ref is not None and inspect.getsource(cast(Any, cls).forward) == ref
        except (OSError, TypeError, AttributeError):
            _CHECKED[cls] = False
    return _CHECKED[cls]


def rms_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    """transformers' Llama RMSNorm ``norm`` (its ``weight`` and ``variance_epsilon``) applied
    to ``x`` through one ``F.rms_norm``: normalised in fp32, scaled after the cast back to
    ``x``'s dtype, as transformers orders it. The local engine's fused decoder and
    ``train.fused_norm`` both compute their norms here."""
    shape = (x.shape[-1],)
    if x.dtype == torch.float32:
        return F.rms_norm(x, shape, norm.weight, norm.variance_epsilon)
    normed = F.rms_norm(x.float(), shape, None, norm.variance_epsilon)
    return norm.weight * normed.to(x.dtype)


def _rms_norm_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    return rms_norm(hidden_states, self)


def fuse_rms_norms(model: torch.nn.Module) -> int:
    """Give every Llama-form RMSNorm of ``model`` the fused forward, in place; returns how many
    modules changed (0 for a model without them)."""
    n = 0
    for module in model.modules():
        if _is_llama_norm(type(module)) and hasattr(module, "variance_epsilon"):
            module.forward = types.MethodType(_rms_norm_forward, module)  # type: ignore[method-assign]
            n += 1
    return n
