"""megatron-core's ``GPTModel`` for a :class:`~megatron_backend.layout.Layout` (local layer spec).

The local spec (megatron-core's own modules, no TransformerEngine) runs on every host; fusions
that need CUDA kernels (bias/activation, masked softmax, RoPE, gradient-accumulation fusion)
are turned off so the same config builds on the CPU and on a GPU.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from megatron_backend.layout import Layout

RECOMPUTE = {
    "none": {},
    "selective": {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]},
    "full": {"recompute_granularity": "full", "recompute_method": "uniform"},
}


def transformer_config(layout: Layout, dtype: torch.dtype, mg: Any,
                       router_losses: dict[str, Any] | None = None) -> Any:
    """``router_losses``: megatron's load-balancing and z-loss keys
    (``router_losses.config_kwargs``; default none)."""
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

    recompute: dict[str, Any] = dict(cast(dict[str, Any], RECOMPUTE[mg.recompute]))
    moe: dict[str, Any] = {}
    ep = int(getattr(mg, "expert_model_parallel_size", 1))
    if layout.num_experts:
        moe = dict(
            num_moe_experts=layout.num_experts, moe_router_topk=layout.top_k,
            moe_ffn_hidden_size=layout.moe_ffn,
            # Qwen3-MoE's gate: softmax over every expert, top-k, renormalised when
            # norm_topk_prob. Megatron's default (top-k of the logits, then a softmax over
            # them) is the renormalised one; pre-softmax (softmax over all, then top-k) the
            # other.
            moe_router_pre_softmax=not layout.norm_topk,
            **(router_losses or {"moe_router_load_balancing_type": "none",
                                 "moe_aux_loss_coeff": 0.0}),
            # Expert parallelism: the alltoall dispatcher (each rank sends each expert's
            # tokens to the rank holding it; token counts may differ between ranks: only the
            # number of forwards must match). Without it no token leaves the rank and the
            # allgather dispatcher does no communication at all.
            moe_token_dispatcher_type="alltoall" if ep > 1 else "allgather",
            moe_grouped_gemm=False,
            expert_model_parallel_size=ep,
            moe_permute_fusion=False,
        )
    if mg.recompute == "full":
        recompute["recompute_num_layers"] = mg.recompute_num_layers
    return TransformerConfig(
        num_layers=layout.num_layers,
        hidden_size=layout.hidden,
        ffn_hidden_size=layout.ffn,
        num_attention_heads=layout.heads,
        num_query_groups=layout.kv_heads,
        kv_channels=layout.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=layout.norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=layout.qkv_bias,
        qk_layernorm=layout.qk_norm,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=mg.tensor_model_parallel_size,
        pipeline_model_parallel_size=mg.pipeline_model_parallel_size,
        context_parallel_size=mg.context_parallel_size,
        sequence_parallel=mg.sequence_parallel,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=True,
        perform_initialization=False,  # every weight is overwritten from the HF checkpoint
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        gradient_accumulation_fusion=False,
        attention_softmax_in_fp32=True,
        **recompute,
        **moe,
    )


def _moe_layer_without_sequence_parallel() -> type:
    """megatron-core's ``MoELayer`` minus one guard: its ``forward`` raises in training when
    tensor parallelism is on without sequence parallelism ("performance may degrade"). Without
    sequence parallelism every TP rank holds the same tokens; the dispatcher gathers the TP
    ranks' copies, each rank's slice of every expert computes them all and the reduce-scatter
    hands each rank the sum over slices for its own copy: the output, and the gradients of
    the layer's input and of the router, are exact. Each expert slice's own gradient, though,
    sums the TP copies' contributions: TP times the model's, so a hook on every expert
    parameter divides it by TP. The expert work is TP times what sequence parallelism would
    do; sequence parallelism needs TransformerEngine here (refused on the CPU), so this is
    what TP > 1 for a mixture of experts runs on. The guard reads only the layer's own
    ``training`` flag (nothing else in the layer does), so ``forward`` hides it for the call."""
    from megatron.core.transformer.moe.moe_layer import MoELayer

    class MoELayerWithoutSequenceParallel(MoELayer):
        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            copies = float(config.tensor_model_parallel_size)
            for p in self.experts.parameters():
                p.register_hook(lambda g: g / copies)

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            module = cast(torch.nn.Module, self)  # (megatron's classes are untyped)
            training, module.training = module.training, False
            try:
                return super().forward(*args, **kwargs)
            finally:
                module.training = training

    return MoELayerWithoutSequenceParallel


def build_gpt(layout: Layout, dtype: torch.dtype, mg: Any, device: torch.device,
              first: bool = True, last: bool = True,
              router_losses: dict[str, Any] | None = None) -> Any:
    """An uninitialised GPTModel of ``layout`` on ``device`` (weights come from the converter);
    ``first`` / ``last``: whether this pipeline stage embeds / computes the logits;
    ``router_losses``: as :func:`transformer_config` takes it."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    cfg = transformer_config(layout, dtype, mg, router_losses)
    if layout.num_experts:
        import megatron.core.transformer.moe.moe_utils as moe_utils

        # megatron-core 0.16 reads this TransformerEngine symbol in the router's linear even
        # when TransformerEngine is absent (a NameError): absent means None, as it intends
        if not hasattr(moe_utils, "te_general_gemm"):
            moe_utils.te_general_gemm = None
    spec = get_gpt_layer_local_spec(qk_layernorm=layout.qk_norm, normalization="RMSNorm",
                                    num_experts=layout.num_experts or None,
                                    moe_grouped_gemm=False)
    if layout.num_experts and cfg.tensor_model_parallel_size > 1 and not cfg.sequence_parallel:
        from megatron.core.transformer.moe.moe_utils import get_default_pg_collection

        mlp = spec.submodules.mlp
        mlp.module = _moe_layer_without_sequence_parallel()
        # the process groups TransformerLayer passes a MoELayer; it recognises MoELayer only by
        # identity, so it logs "Unknown MLP type ... Using default kwargs" for the subclass
        mlp.params = {**mlp.params, "pg_collection": get_default_pg_collection()}
    model = GPTModel(
        config=cfg, transformer_layer_spec=spec, vocab_size=layout.padded_vocab,
        max_sequence_length=layout.max_positions, position_embedding_type="rope",
        rotary_base=layout.rope_theta,  # type: ignore[arg-type]  # annotated int, used as a float
        # Across pipeline stages the backend keeps the tied copies itself (the last stage's
        # output weight loaded from the embedding, gradients summed over the embedding group:
        # optim.Accumulation), as Megatron does, but without Megatron's set-up of that copy,
        # which moves it with `.cuda()`.
        share_embeddings_and_output_weights=layout.tied and first and last,
        # vocab_parallel_logprobs: each TP rank keeps its slice of the logits (the softmax is
        # reduced over the TP group, megatron_backend.vocab_parallel); else the full
        # vocabulary's logits on every rank, log-softmax as the torch backend does
        parallel_output=bool(getattr(mg, "vocab_parallel_logprobs", True)),
        pre_process=first, post_process=last,
    )
    return model.to(device)
