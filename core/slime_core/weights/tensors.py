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
