"""Hugging Face <-> megatron-core state dicts for the families of :mod:`megatron_backend.layout`.

Megatron's layout, per decoder layer (local spec):

* ``self_attention.linear_qkv``: q, k and v fused along the output dimension, **grouped by
  key/value head**: for each query group g, its ``heads / kv_heads`` query heads, then k_g,
  then v_g (each ``head_dim`` rows). Column-parallel: TP rank r holds groups
  ``[r * G/tp, (r+1) * G/tp)``, i.e. a contiguous slice of the fused rows. Bias the same way.
* ``mlp.linear_fc1``: ``[gate; up]`` fused, column-parallel **per rank**: rank r holds
  ``[gate_r; up_r]`` (its slice of gate, then its slice of up), because the GLU chunks the
  local output in two.
* ``linear_proj`` and ``linear_fc2``: row-parallel (split along the input dimension).
* ``embedding.word_embeddings`` / ``output_layer``: vocabulary-parallel, padded to
  ``layout.padded_vocab`` rows with zeros (the padding is dropped on the way back).
* norms (input, pre-MLP, final, Qwen3's q/k): replicated.

``to_megatron`` gives one TP rank's shard; ``to_hf`` takes every rank's shard of each tensor
(as gathered by :mod:`megatron_backend.gather`) and returns exactly the tensors, names and
shapes of the HF model's ``state_dict()`` (with tied embeddings: ``lm_head.weight`` is the
embedding, as transformers reports it).
"""

from __future__ import annotations

import torch

from megatron_backend.layout import Layout

# tensor -> how it is split over TP ranks: 0 = rows (column-parallel), 1 = columns (row-parallel)
COLUMN, ROW = 0, 1


def megatron_names(layout: Layout) -> dict[str, int | None]:
    """Every parameter of the GPTModel of ``layout`` and its TP split (None: replicated)."""
    names: dict[str, int | None] = {"embedding.word_embeddings.weight": COLUMN}
    for i in range(layout.num_layers):
        p = f"decoder.layers.{i}."
        names[p + "input_layernorm.weight"] = None
        names[p + "self_attention.linear_qkv.weight"] = COLUMN
        if layout.qkv_bias:
            names[p + "self_attention.linear_qkv.bias"] = COLUMN
        if layout.qk_norm:
            names[p + "self_attention.q_layernorm.weight"] = None
            names[p + "self_attention.k_layernorm.weight"] = None
        names[p + "self_attention.linear_proj.weight"] = ROW
        names[p + "pre_mlp_layernorm.weight"] = None
        names[p + "mlp.linear_fc1.weight"] = COLUMN
        names[p + "mlp.linear_fc2.weight"] = ROW
    names["decoder.final_layernorm.weight"] = None
    if not layout.tied:
        names["output_layer.weight"] = COLUMN
    return names


def _pad_vocab(w: torch.Tensor, layout: Layout) -> torch.Tensor:
    if w.shape[0] == layout.padded_vocab:
        return w
    pad = w.new_zeros((layout.padded_vocab - w.shape[0], *w.shape[1:]))
    return torch.cat([w, pad])


def _chunk(w: torch.Tensor, dim: int, rank: int, size: int) -> torch.Tensor:
    return torch.chunk(w, size, dim=dim)[rank]


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Layout) -> torch.Tensor:
    """HF q, k, v (weights ``[n*d, h]`` or biases ``[n*d]``) -> Megatron's grouped layout."""
    g, n, d = layout.kv_heads, layout.heads_per_group, layout.head_dim
    rest = q.shape[1:]
    fused = torch.cat([q.reshape(g, n * d, *rest), k.reshape(g, d, *rest),
                       v.reshape(g, d, *rest)], dim=1)
    return fused.reshape(g * (n + 2) * d, *rest)


def split_qkv(fused: torch.Tensor, layout: Layout) -> tuple[torch.Tensor, ...]:
    """Inverse of :func:`fuse_qkv` on the full (all-ranks) fused tensor."""
    g, n, d = layout.kv_heads, layout.heads_per_group, layout.head_dim
    rest = fused.shape[1:]
    grouped = fused.reshape(g, (n + 2) * d, *rest)
    q, k, v = torch.split(grouped, [n * d, d, d], dim=1)
    return (q.reshape(g * n * d, *rest), k.reshape(g * d, *rest), v.reshape(g * d, *rest))


def to_megatron(hf: dict[str, torch.Tensor], layout: Layout, tp_rank: int = 0,
                tp_size: int = 1) -> dict[str, torch.Tensor]:
    """TP rank ``tp_rank``'s shard of every GPTModel parameter, from an HF state dict."""
    out: dict[str, torch.Tensor] = {}

    def put(name: str, full: torch.Tensor, split: int | None) -> None:
        t = full if split is None else _chunk(full, split, tp_rank, tp_size)
        out[name] = t.contiguous().clone()

    put("embedding.word_embeddings.weight", _pad_vocab(hf["model.embed_tokens.weight"], layout),
        COLUMN)
    for i in range(layout.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        put(m + "input_layernorm.weight", hf[h + "input_layernorm.weight"], None)
        a = h + "self_attn."
        put(m + "self_attention.linear_qkv.weight",
            fuse_qkv(hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"],
                     layout), COLUMN)
        if layout.qkv_bias:
            put(m + "self_attention.linear_qkv.bias",
                fuse_qkv(hf[a + "q_proj.bias"], hf[a + "k_proj.bias"], hf[a + "v_proj.bias"],
                         layout), COLUMN)
        if layout.qk_norm:
            put(m + "self_attention.q_layernorm.weight", hf[a + "q_norm.weight"], None)
            put(m + "self_attention.k_layernorm.weight", hf[a + "k_norm.weight"], None)
        put(m + "self_attention.linear_proj.weight", hf[a + "o_proj.weight"], ROW)
        put(m + "pre_mlp_layernorm.weight", hf[h + "post_attention_layernorm.weight"], None)
        gate = _chunk(hf[h + "mlp.gate_proj.weight"], 0, tp_rank, tp_size)
        up = _chunk(hf[h + "mlp.up_proj.weight"], 0, tp_rank, tp_size)
        out[m + "mlp.linear_fc1.weight"] = torch.cat([gate, up]).contiguous()
        put(m + "mlp.linear_fc2.weight", hf[h + "mlp.down_proj.weight"], ROW)
    put("decoder.final_layernorm.weight", hf["model.norm.weight"], None)
    if not layout.tied:
        put("output_layer.weight", _pad_vocab(hf["lm_head.weight"], layout), COLUMN)
    return out


def to_hf(shards: dict[str, list[torch.Tensor]], layout: Layout) -> dict[str, torch.Tensor]:
    """HF state dict from every TP rank's shard of each Megatron tensor (replicated: any one)."""
    split = megatron_names(layout)

    def full(name: str) -> torch.Tensor:
        parts = shards[name]
        dim = split[name]
        return parts[0] if dim is None or len(parts) == 1 else torch.cat(parts, dim=dim)

    out: dict[str, torch.Tensor] = {}
    embed = full("embedding.word_embeddings.weight")[: layout.vocab]
    out["model.embed_tokens.weight"] = embed
    for i in range(layout.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        a = h + "self_attn."
        q, k, v = split_qkv(full(m + "self_attention.linear_qkv.weight"), layout)
        out[a + "q_proj.weight"], out[a + "k_proj.weight"], out[a + "v_proj.weight"] = q, k, v
        if layout.qkv_bias:
            qb, kb, vb = split_qkv(full(m + "self_attention.linear_qkv.bias"), layout)
            out[a + "q_proj.bias"], out[a + "k_proj.bias"], out[a + "v_proj.bias"] = qb, kb, vb
        out[a + "o_proj.weight"] = full(m + "self_attention.linear_proj.weight")
        if layout.qk_norm:
            out[a + "q_norm.weight"] = full(m + "self_attention.q_layernorm.weight")
            out[a + "k_norm.weight"] = full(m + "self_attention.k_layernorm.weight")
        gates, ups = zip(*(torch.chunk(s, 2, dim=0) for s in shards[m + "mlp.linear_fc1.weight"]),
                         strict=True)
        out[h + "mlp.gate_proj.weight"] = torch.cat(gates)
        out[h + "mlp.up_proj.weight"] = torch.cat(ups)
        out[h + "mlp.down_proj.weight"] = full(m + "mlp.linear_fc2.weight")
        out[h + "input_layernorm.weight"] = full(m + "input_layernorm.weight")
        out[h + "post_attention_layernorm.weight"] = full(m + "pre_mlp_layernorm.weight")
    out["model.norm.weight"] = full("decoder.final_layernorm.weight")
    out["lm_head.weight"] = embed if layout.tied else full("output_layer.weight")[: layout.vocab]
    return out
