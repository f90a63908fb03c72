"""What the converters and the model builder need to know of a Hugging Face decoder config.

Supported families: Llama (and Mistral-shaped Llamas), Qwen2 / Qwen2.5 (bias on q, k, v),
Qwen3 (RMSNorm on each head's queries and keys) and Qwen3-MoE (Qwen3's attention, every
layer's MLP a mixture of experts: experts split over expert-parallel ranks, or each expert's
MLP split over tensor-parallel ranks; not both at once).
Everything else fails here, before any weight is read, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAMILIES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
            "qwen3_moe": "qwen3_moe"}


@dataclass(frozen=True)
class Layout:
    family: str  # llama | qwen2 | qwen3
    num_layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    padded_vocab: int
    tied: bool
    qkv_bias: bool
    qk_norm: bool
    norm_eps: float
    rope_theta: float
    max_positions: int
    # mixture of experts (qwen3_moe): experts per layer, experts per token, each expert's
    # hidden size, whether the top-k gate weights are renormalised (0: a dense model)
    num_experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0
    norm_topk: bool = True

    @property
    def heads_per_group(self) -> int:
        return self.heads // self.kv_heads


def rope_theta(hf: Any) -> float:
    """RoPE base: transformers 5 keeps it in ``rope_parameters``, older ones in ``rope_theta``.

    Only plain RoPE is converted: a scaled variant (llama3, yarn, dynamic ...) changes the
    frequencies and GPTModel would silently compute something else.
    """
    params = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise ValueError(f"megatron backend: rope_type {kind!r} is not supported (only default "
                         "RoPE is converted)")
    theta = params.get("rope_theta", getattr(hf, "rope_theta", None))
    if theta is None:
        raise ValueError("megatron backend: the model config has no rope_theta")
    return float(theta)


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """Megatron's padding: a multiple of ``divisible_by * tp`` so every TP rank holds equal rows."""
    step = divisible_by * tp
    return -(-vocab // step) * step


def layout_of(hf: Any, tp: int = 1, divisible_by: int = 128, ep: int = 1) -> Layout:
    model_type = getattr(hf, "model_type", "")
    family = FAMILIES.get(model_type)
    if family is None:
        raise ValueError(f"megatron backend: model_type {model_type!r} is not supported "
                         f"(supported: {', '.join(sorted(FAMILIES))})")
    act = getattr(hf, "hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"megatron backend: hidden_act {act!r} is not supported (silu only)")
    if family == "llama" and (getattr(hf, "attention_bias", False) or getattr(hf, "mlp_bias", False)):
        raise ValueError("megatron backend: Llama with attention_bias / mlp_bias is not supported")
    if getattr(hf, "use_sliding_window", False) or (
            family == "llama" and getattr(hf, "sliding_window", None)):
        raise ValueError("megatron backend: sliding-window attention is not supported")
    heads = int(hf.num_attention_heads)
    kv = int(getattr(hf, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(hf, "head_dim", None) or hf.hidden_size // heads)
    if kv % tp or heads % tp:
        raise ValueError(f"megatron.tensor_model_parallel_size = {tp} must divide the attention "
                         f"heads ({heads}) and key/value heads ({kv})")
    moe: dict[str, Any] = {}
    if family == "qwen3_moe":
        if getattr(hf, "mlp_only_layers", None) or int(getattr(hf, "decoder_sparse_step", 1)) != 1:
            raise ValueError("megatron backend: Qwen3-MoE with dense layers (mlp_only_layers, "
                             "decoder_sparse_step) is not supported: every layer must be MoE")
        moe = {"num_experts": int(hf.num_experts), "top_k": int(hf.num_experts_per_tok),
               "moe_ffn": int(hf.moe_intermediate_size), "norm_topk": bool(hf.norm_topk_prob)}
        if moe["num_experts"] % ep:
            raise ValueError(f"megatron.expert_model_parallel_size = {ep} must divide the "
                             f"model's {moe['num_experts']} experts")
        if tp > 1 and ep > 1:
            raise ValueError(f"megatron backend: a mixture-of-experts model with both "
                             f"tensor_model_parallel_size = {tp} and expert_model_parallel_size "
                             f"= {ep} is not implemented (one of the two at a time)")
        if moe["moe_ffn"] % tp:
            raise ValueError(f"megatron.tensor_model_parallel_size = {tp} must divide "
                             f"moe_intermediate_size ({moe['moe_ffn']})")
    if int(hf.intermediate_size) % tp:
        raise ValueError(f"megatron.tensor_model_parallel_size = {tp} must divide "
                         f"intermediate_size ({hf.intermediate_size})")
    return Layout(
        family=family,
        num_layers=int(hf.num_hidden_layers),
        hidden=int(hf.hidden_size),
        ffn=int(hf.intermediate_size),
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        vocab=int(hf.vocab_size),
        padded_vocab=padded_vocab(int(hf.vocab_size), divisible_by, tp),
        tied=bool(getattr(hf, "tie_word_embeddings", False)),
        qkv_bias=family == "qwen2",
        qk_norm=family in ("qwen3", "qwen3_moe"),
        norm_eps=float(hf.rms_norm_eps),
        rope_theta=rope_theta(hf),
        max_positions=int(getattr(hf, "max_position_embeddings", 4096)),
        **moe,
    )
