"""The one-pass training forward's attention as SDPA's causal call, whatever else is tracing it.

The fused-head training forward (:func:`slime_core.trainkit.batching.response_log_probs`)
passes no padding mask: its batches are right-padded, so under the causal mask no real token
sees padding. Eagerly, transformers then skips building a mask and calls SDPA with
``is_causal=True`` and the grouped key/value heads as they are, which flash or cuDNN attention
take. Under ``torch.compile`` it does not. Before torch 2.14 it never skips the mask while
dynamo traces, so a compiled forward builds a boolean [B, 1, L, L] causal mask, repeats the
key/value heads to every query head, and SDPA takes its memory-efficient kernel: 72 calls and
~55 ms of the 0.5B anchor's training step on an H100, against 0.44-0.56 ms a call for cuDNN or
flash at that shape (``bench/sdpa_backends.py``).

:func:`causal_attention` makes the decoder's attention :func:`causal_sdpa` for the forwards
inside. That name has no mask function in transformers, so no mask is built, and SDPA is called
causally with the grouped heads. It applies only where the mask would be exactly causal
(:func:`causal_sdpa_applies`): SDPA attention in every layer, no sliding window.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

NAME = "slime_causal_sdpa"


def causal_sdpa_applies(config: Any) -> bool:
    """True when a model of ``config`` attends through SDPA over the full causal mask in every
    layer (no sliding window): its mask is the causal mask plus the caller's padding, so
    ``is_causal`` may stand for it when there is no padding mask."""
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    return getattr(config, "sliding_window", None) is None or not getattr(
        config, "use_sliding_window", True
    )


def causal_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0,
                scaling: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function: causal SDPA over ``query`` [B, H, L, D] and the
    grouped ``key`` / ``value`` [B, H_kv, L, D]; the output [B, L, H, D]. A call it cannot
    stand for (a cache, so query and key lengths differ; a position bias; a layer that is not
    causal) goes to transformers' SDPA function."""
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    if (query.shape[2] != key.shape[2] or kwargs.get("position_bias") is not None
            or not causal):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, dropout_p=dropout, is_causal=True,
                                         scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def attention_implementation(model: Any, name: str) -> Iterator[None]:
    """``model``'s attention function (its config's ``_attn_implementation``) set to ``name``
    for the forwards inside; restored afterwards. ``name`` must be one transformers knows:
    built in, or registered with ``transformers.AttentionInterface.register``."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


@contextlib.contextmanager
def causal_attention(decoder: torch.nn.Module) -> Iterator[None]:
    """``decoder``'s attention as :func:`causal_sdpa` for the forwards inside (restored after),
    where :func:`causal_sdpa_applies`; a no-op elsewhere. Only for forwards whose mask would be
    purely causal: no padding mask, no cache."""
    config = getattr(decoder, "config", None)
    if config is None or not causal_sdpa_applies(config):
        yield
        return
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, causal_sdpa)  # a dict entry: registering again is free
    with attention_implementation(decoder, NAME):
        yield
