"""Engine side: adapter tensors in, merged weights of the engine's own layers out.

For each adapted layer the engine keeps a copy of its base weight ``W0`` (taken at the first
sync, from the weights the engine loaded) and serves ``W0 + scaling * (B @ A)`` for every
version, computed in fp32 and cast to the layer's dtype, so versions never accumulate rounding
(unmerging the previous version instead would). The copies cost one adapted layer's weight
each (for ``attention_mlp``, most of the model), on the engine's device.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import torch

# engine model -> {weight name: base copy}; weak, so a shut-down engine's copies go with it
_BASES: weakref.WeakKeyDictionary[torch.nn.Module, dict[str, torch.Tensor]] = \
    weakref.WeakKeyDictionary()


def split_name(name: str) -> tuple[str, str] | None:
    """``<module>.lora_A.<adapter>.weight`` -> (``<module>``, ``lora_A``); None for others."""
    for kind in ("lora_A", "lora_B"):
        marker = f".{kind}."
        if marker in name:
            return name.split(marker, 1)[0], kind
    return None


def merged_weights(model: torch.nn.Module, weights: Mapping[str, Any], scaling: float,
                   version: int) -> dict[str, torch.Tensor] | None:
    """``{<module>.weight: W0 + scaling * B @ A}`` for every adapted module in ``weights``;
    None when ``weights`` holds no adapter tensor (a full version, passed through)."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    others = []
    for name, t in weights.items():
        split = split_name(name)
        if split is None:
            others.append(name)
            continue
        pairs.setdefault(split[0], {})[split[1]] = t
    if not pairs:
        return None
    where = f"slime_lora: weight version {version}"
    if others:
        raise ValueError(f"{where} mixes adapter tensors with other tensors ({others[:3]})")
    state = model.state_dict()
    bases = _BASES.setdefault(model, {})
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for module, ab in pairs.items():
            if set(ab) != {"lora_A", "lora_B"}:
                raise ValueError(f"{where}: {module!r} came with only {sorted(ab)}")
            key = f"{module}.weight"
            current = state.get(key)
            if current is None:
                raise KeyError(f"{where}: the engine's model has no layer {module!r} (it has "
                               f"{len(state)} tensors, e.g. {next(iter(state))})")
            a, b = ab["lora_A"], ab["lora_B"]
            if (b.shape[0], a.shape[1]) != tuple(current.shape) or a.shape[0] != b.shape[1]:
                raise ValueError(f"{where}: {module!r} got lora_A {tuple(a.shape)} and lora_B "
                                 f"{tuple(b.shape)}, its weight is {tuple(current.shape)}")
            base = bases.get(key)
            if base is None:
                base = bases[key] = current.detach().clone()
            dev = base.device
            delta = b.to(dev, torch.float32) @ a.to(dev, torch.float32)
            out[key] = (base.float() + scaling * delta).to(base.dtype)
    return out
