"""Helpers on name -> tensor mappings shared by the trainers' checkpoint writers and the weight
transports (safetensors files)."""

from __future__ import annotations

from typing import Any


def untie(state: dict[str, Any]) -> dict[str, Any]:
    """safetensors refuses shared storage (tied embeddings): give each tensor its own copy."""
    seen: dict[int, str] = {}
    out = {}
    for k, v in state.items():
        ptr = v.data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.setdefault(ptr, k)
    return out


def distinct(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with one name per tensor: of names sharing one tensor (tied embeddings:
    ``lm_head.weight`` is ``model.embed_tokens.weight``), the first. What a weight sync sends:
    the engine's model is tied the same way, so writing one name writes both (engines built on
    vLLM or SGLang skip a tied model's ``lm_head`` anyway), and the tied tensor's bytes travel
    once. A view of part of another tensor keeps its name, and so does an empty tensor (every
    empty tensor has address 0)."""
    seen: set[tuple[Any, ...]] = set()
    out = {}
    for k, v in state.items():
        key = (v.device, v.data_ptr(), tuple(v.shape), tuple(v.stride()), v.dtype)
        if v.numel() and key in seen:
            continue
        seen.add(key)
        out[k] = v
    return out
