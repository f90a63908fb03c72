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

TINY_QWEN2: dict[str, Any] = {
    "model_type": "qwen2", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 256, "tie_word_embeddings": True,
}
"""A ~50k-parameter Qwen2 built from config (``model.init_config``) for fast tests."""


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


def build_test_config(**sections: dict[str, Any]) -> Any:
    """A validated config of the core's sections only (no plugin sections)."""
    from slime_core.config.sections import SECTIONS
    from slime_core.config import ConfigSchema, load_config
    from slime_hookspecs import ConfigSection

    schema = ConfigSchema()
    for name, cls, doc in SECTIONS:
        schema.add(ConfigSection(name=name, schema=cls, summary=doc))
    return load_config(schema, data=sections)
