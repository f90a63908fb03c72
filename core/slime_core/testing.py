"""Helpers for tests of slime and of plugins: a tiny offline tokenizer and model config.

Like pytest's ``pytester``, this ships with the core so plugin authors can use it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if tools %}<tools>{% for t in tools %}{{ t['function']['name'] }};{% endfor %}\n{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)

THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{% if add_generation_prompt %}<assistant>{% endif %}",
    "{% if add_generation_prompt %}<assistant>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}"
    "{% endif %}",
)
"""``CHAT_TEMPLATE`` with Qwen3's thinking switch: ``apply_chat_template(...,
enable_thinking=False)`` puts an empty ``<think></think>`` after the generation prompt (thinking
off), as Qwen3's template does; without the keyword the model is left to think. Tests of
``data.chat_template_kwargs`` use it to see the keyword reach the template."""

TINY_QWEN2: dict[str, Any] = {
    "model_type": "qwen2", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 256, "tie_word_embeddings": True,
}
"""A ~50k-parameter Qwen2 built from config (``model.init_config``) for fast tests."""

TINY_QWEN3_MOE: dict[str, Any] = {
    "model_type": "qwen3_moe", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    "moe_intermediate_size": 16, "num_experts": 8, "num_experts_per_tok": 2,
    "norm_topk_prob": True, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}
"""A tiny Qwen3-MoE (8 experts, top-2, 2 MoE layers) for fast tests."""

TINY_OLMOE: dict[str, Any] = {
    "model_type": "olmoe", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 16,
    "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 256,
    "tie_word_embeddings": True, "eos_token_id": 0, "pad_token_id": 1, "bos_token_id": None,
}
"""A tiny OLMoE (8 experts, top-2, unnormalised gates: ``norm_topk_prob`` false)."""


TINY_DECODERS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2_gqa_bias": ("Qwen2", {"num_attention_heads": 4, "num_key_value_heads": 2}),
    "llama_mha_untied": ("Llama", {"num_attention_heads": 4, "num_key_value_heads": 4,
                                   "tie_word_embeddings": False}),
    "llama_all_biases": ("Llama", {"num_attention_heads": 4, "num_key_value_heads": 1,
                                   "attention_bias": True, "mlp_bias": True}),
    "llama3_rope": ("Llama", {"num_attention_heads": 4, "num_key_value_heads": 2, "rope_parameters": {
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    "qwen3_qk_norm": ("Qwen3", {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}),
    "mistral": ("Mistral", {"num_attention_heads": 4, "num_key_value_heads": 2,
                            "sliding_window": None}),
}
"""One tiny model per Llama-family variant the fused paths support (GQA with biases, MHA
untied, every bias, llama3 rope, Qwen3 q/k norms, Mistral): ``family -> (transformers class
prefix, config keys)``, built by :func:`tiny_decoder`."""

TINY_DECODER_COMMON: dict[str, Any] = {
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
    "max_position_embeddings": 128, "initializer_range": 0.2,
}


def tiny_decoder(arch: str, dtype: Any = None) -> Any:
    """The :data:`TINY_DECODERS` model ``arch`` (eval mode, seed 0, ``dtype`` or float32), its
    biases and norm weights moved away from 0 / 1 so that they matter."""
    import torch
    import transformers

    family, extra = TINY_DECODERS[arch]
    config = getattr(transformers, f"{family}Config")(**TINY_DECODER_COMMON, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}ForCausalLM")(config)
    model = model.to(dtype or torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


def write_char_tokenizer(path: Path, extra_tokens: Sequence[str] = (),
                         chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """Save a character-level ``PreTrainedTokenizerFast`` (printable ASCII, ``<eos>``, chat
    template) under ``path``; no network needed. ``extra_tokens`` are added as ordinary (not
    special) tokens after the characters, so decoded text still shows them."""
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for ch in string.printable:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    if chat_template is not None:
        fast.chat_template = chat_template
    if extra_tokens:
        fast.add_tokens(list(extra_tokens))
    fast.save_pretrained(str(path))
    return path


def build_test_config(*contributed: Any, **sections: dict[str, Any]) -> Any:
    """A validated config of the core's sections plus the ``ConfigSection`` objects given
    positionally (a plugin's own sections or its extension of ``[algorithm]``, as its
    ``slime_add_config`` returns them), with ``sections`` as the TOML tables."""
    from slime_hookspecs import ConfigSection

    from slime_core.config import ConfigSchema, load_config
    from slime_core.config.sections import RECORD_KEYS, SECTIONS

    schema = ConfigSchema()
    for name, cls, doc in SECTIONS:
        schema.add(ConfigSection(name=name, schema=cls, summary=doc, owner="core_config",
                                 record_keys=RECORD_KEYS.get(name, {})))
    for item in contributed:
        for sec in item if isinstance(item, (list, tuple)) else [item]:
            schema.add(sec)
    schema.check_extensions()
    return load_config(schema, data=sections)


def static_buffer_graphs(module: Any, sample_args: tuple[Any, ...], pool: Any = None,
                         fuse_linears: bool = True) -> Any:
    """A stand-in for :func:`slime_core.trainkit.graphed_decoder.capture_accumulating` on a
    CPU, for tests of code that replays captured graphs
    (:class:`slime_core.trainkit.graphed_decoder.GraphedDecoder`).

    It captures nothing (each call runs ``module`` eagerly) but keeps to a capture's terms:
    the trainable parameters' gradients must be allocated when it is made, the backward adds
    into exactly those tensors (one replaced raises, as a replay does; with ``fuse_linears``
    the plain linear layers add in their products, as the capture's do), and the output lives
    in one buffer written again by every call, so a caller that reads an output after the
    next call sees it overwritten, as on a GPU.
    """
    import contextlib

    import torch

    from slime_core.trainkit.accumulating_linear import accumulating_linears
    from slime_core.trainkit.graphed_decoder import _allocated_grads, _check_grads, _trainable

    params = _trainable(module)
    grads = _allocated_grads(params)
    static_out: list[Any] = []
    anchor = torch.empty((), requires_grad=True)

    class _Replay(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, _anchor: Any, *inputs: Any) -> Any:
            fused = accumulating_linears(module) if fuse_linears else contextlib.nullcontext()
            with torch.enable_grad(), fused:
                out = module(*inputs)
            ctx.out = out
            if not static_out:
                static_out.append(torch.empty_like(out))
            static_out[0].copy_(out.detach())
            return static_out[0].detach()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            _check_grads(module, params, grads)
            torch.autograd.backward(ctx.out, grad, inputs=params)
            return (None, *([None] * len(sample_args)))

    def replay(*args: Any) -> Any:
        return _Replay.apply(anchor, *args)

    return replay
