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
* Qwen3-MoE: ``mlp.router.weight`` (HF ``mlp.gate.weight``, ``[experts, hidden]``) and
  ``mlp.experts.local_experts.{e}.linear_fc1`` / ``linear_fc2`` (HF ``mlp.experts.gate_up_proj[e]``,
  ``[gate; up]`` as Megatron's GLU chunks it, and ``down_proj[e]``); the router is replicated,
  each expert split over TP ranks as a dense MLP is (expert tensor parallelism = TP: ``fc1``
  ``[gate_r; up_r]`` per rank, ``fc2`` row-parallel); with expert parallelism ``ep`` rank r of
  the expert group holds the global experts ``[r * E/ep, (r+1) * E/ep)``, numbered locally
  from 0 (Megatron's ``local_expert_indices``);
* ``embedding.word_embeddings`` / ``output_layer``: vocabulary-parallel, padded to
  ``layout.padded_vocab`` rows with zeros (the padding is dropped on the way back).
* norms (input, pre-MLP, final, Qwen3's q/k): replicated.
* pipeline stages hold equal runs of layers, numbered locally (``decoder.layers.0`` is the
  stage's first); the first stage has the embedding, the last the final norm and the head
  (with tied embeddings and several stages: its own copy of the embedding).

``to_megatron`` gives one TP (and expert-parallel) rank's shard; ``to_hf`` takes every rank's
shard of each tensor (as gathered by :mod:`megatron_backend.gather`, the experts under their
global numbers) and returns exactly the tensors, names and shapes of the HF model's
``state_dict()`` (with tied embeddings: ``lm_head.weight`` is the embedding, as transformers
reports it).
"""

from __future__ import annotations

import torch

from megatron_backend.layout import Layout

# tensor -> how it is split over TP ranks: 0 = rows (column-parallel), 1 = columns (row-parallel)
COLUMN, ROW = 0, 1


def stage_layers(layout: Layout, stage: int = 0, stages: int = 1) -> range:
    """The global indices of the decoder layers pipeline stage ``stage`` holds (equal shares)."""
    if layout.num_layers % stages:
        raise ValueError(f"megatron.pipeline_model_parallel_size = {stages} must divide the "
                         f"model's {layout.num_layers} layers")
    n = layout.num_layers // stages
    return range(stage * n, (stage + 1) * n)


def tp_partial_grad(name: str) -> bool:
    """Whether a replicated parameter's gradient is partial on each TP rank and must be summed
    over the TP group: Qwen3's q/k RMSNorm weights, applied to every head, of which each TP
    rank holds its own (Megatron's ``finalize_model_grads`` sums them likewise)."""
    return ".self_attention.q_layernorm." in name or ".self_attention.k_layernorm." in name


def is_expert(name: str) -> bool:
    """Whether a Megatron parameter is an expert's (split over the expert-parallel group,
    data-parallel over the expert-data-parallel group only)."""
    return ".mlp.experts." in name


def local_experts(layout: Layout, ep_rank: int = 0, ep_size: int = 1) -> range:
    """The global expert numbers expert-parallel rank ``ep_rank`` holds (equal shares)."""
    n = layout.num_experts // ep_size
    return range(ep_rank * n, (ep_rank + 1) * n)


def megatron_names(layout: Layout, stage: int = 0, stages: int = 1,
                   ep_size: int = 1) -> dict[str, int | None]:
    """Every parameter of pipeline stage ``stage``'s GPTModel and its TP split (None:
    replicated). Layers are numbered locally (0 .. layers per stage - 1), as ``GPTModel``
    names them, and so are experts (``num_experts / ep_size`` of them); with tied embeddings
    and several stages the last stage holds its own copy of the embedding as
    ``output_layer.weight`` (Megatron keeps the two equal)."""
    first, last = stage == 0, stage == stages - 1
    names: dict[str, int | None] = {}
    if first:
        names["embedding.word_embeddings.weight"] = COLUMN
    for i in range(len(stage_layers(layout, stage, stages))):
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
        if layout.num_experts:
            names[p + "mlp.router.weight"] = None
            for e in range(layout.num_experts // ep_size):
                names[p + f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = COLUMN
                names[p + f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = ROW
            continue
        names[p + "mlp.linear_fc1.weight"] = COLUMN
        names[p + "mlp.linear_fc2.weight"] = ROW
    if last:
        names["decoder.final_layernorm.weight"] = None
        if not layout.tied or not first:
            names["output_layer.weight"] = COLUMN
    return names


def _pad_vocab(w: torch.Tensor, layout: Layout) -> torch.Tensor:
    if w.shape[0] == layout.padded_vocab:
        return w
    pad = w.new_zeros((layout.padded_vocab - w.shape[0], *w.shape[1:]))
    return torch.cat([w, pad])


def _chunk(w: torch.Tensor, dim: int, rank: int, size: int) -> torch.Tensor:
    return torch.chunk(w, size, dim=dim)[rank]


def _glu_shard(gate: torch.Tensor, up: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """A column-parallel GLU ``linear_fc1`` shard: rank r's slice of gate, then of up."""
    return torch.cat([_chunk(gate, 0, rank, size), _chunk(up, 0, rank, size)]).contiguous()


def _glu_full(shards: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`_glu_shard` over every rank's shard: (gate, up)."""
    gates, ups = zip(*(torch.chunk(s, 2, dim=0) for s in shards), strict=True)
    return torch.cat(gates), torch.cat(ups)


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
                tp_size: int = 1, stage: int = 0, stages: int = 1, ep_rank: int = 0,
                ep_size: int = 1) -> dict[str, torch.Tensor]:
    """TP rank ``tp_rank``'s shard of every parameter of pipeline stage ``stage`` (of the
    experts, expert-parallel rank ``ep_rank``'s), from an HF state dict."""
    out: dict[str, torch.Tensor] = {}
    first, last = stage == 0, stage == stages - 1

    def put(name: str, full: torch.Tensor, split: int | None) -> None:
        t = full if split is None else _chunk(full, split, tp_rank, tp_size)
        out[name] = t.contiguous().clone()

    if first:
        put("embedding.word_embeddings.weight",
            _pad_vocab(hf["model.embed_tokens.weight"], layout), COLUMN)
    for local, i in enumerate(stage_layers(layout, stage, stages)):
        h, m = f"model.layers.{i}.", f"decoder.layers.{local}."
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
        if layout.num_experts:
            put(m + "mlp.router.weight", hf[h + "mlp.gate.weight"], None)
            for e, g in enumerate(local_experts(layout, ep_rank, ep_size)):
                x = m + f"mlp.experts.local_experts.{e}."
                gate, up = torch.chunk(hf[h + "mlp.experts.gate_up_proj"][g], 2, dim=0)
                out[x + "linear_fc1.weight"] = _glu_shard(gate, up, tp_rank, tp_size)
                put(x + "linear_fc2.weight", hf[h + "mlp.experts.down_proj"][g], ROW)
            continue
        out[m + "mlp.linear_fc1.weight"] = _glu_shard(hf[h + "mlp.gate_proj.weight"],
                                                      hf[h + "mlp.up_proj.weight"], tp_rank,
                                                      tp_size)
        put(m + "mlp.linear_fc2.weight", hf[h + "mlp.down_proj.weight"], ROW)
    if last:
        put("decoder.final_layernorm.weight", hf["model.norm.weight"], None)
        if not layout.tied:
            put("output_layer.weight", _pad_vocab(hf["lm_head.weight"], layout), COLUMN)
        elif not first:
            put("output_layer.weight", _pad_vocab(hf["model.embed_tokens.weight"], layout),
                COLUMN)
    return out


def to_hf(shards: dict[str, list[torch.Tensor]], layout: Layout, stage: int = 0,
          stages: int = 1) -> dict[str, torch.Tensor]:
    """HF tensors of pipeline stage ``stage`` (all of them with one stage) from every TP rank's
    shard of each of its Megatron tensors (replicated ones: any rank's)."""
    split = megatron_names(layout, stage, stages)
    first, last = stage == 0, stage == stages - 1

    def full(name: str) -> torch.Tensor:
        parts = shards[name]
        dim = split[name]
        return parts[0] if dim is None or len(parts) == 1 else torch.cat(parts, dim=dim)

    out: dict[str, torch.Tensor] = {}
    if first:
        embed = full("embedding.word_embeddings.weight")[: layout.vocab]
        out["model.embed_tokens.weight"] = embed
        if layout.tied:
            out["lm_head.weight"] = embed
    for local, i in enumerate(stage_layers(layout, stage, stages)):
        h, m = f"model.layers.{i}.", f"decoder.layers.{local}."
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
        out[h + "input_layernorm.weight"] = full(m + "input_layernorm.weight")
        out[h + "post_attention_layernorm.weight"] = full(m + "pre_mlp_layernorm.weight")
        if layout.num_experts:
            x = m + "mlp.experts.local_experts.{}."
            out[h + "mlp.gate.weight"] = full(m + "mlp.router.weight")
            out[h + "mlp.experts.gate_up_proj"] = torch.stack(
                [torch.cat(_glu_full(shards[x.format(e) + "linear_fc1.weight"]))
                 for e in range(layout.num_experts)])
            out[h + "mlp.experts.down_proj"] = torch.stack(
                [full(x.format(e) + "linear_fc2.weight") for e in range(layout.num_experts)])
            continue
        out[h + "mlp.gate_proj.weight"], out[h + "mlp.up_proj.weight"] = _glu_full(
            shards[m + "mlp.linear_fc1.weight"])
        out[h + "mlp.down_proj.weight"] = full(m + "mlp.linear_fc2.weight")
    if last:
        out["model.norm.weight"] = full("decoder.final_layernorm.weight")
        if not layout.tied:
            out["lm_head.weight"] = full("output_layer.weight")[: layout.vocab]
    return out
