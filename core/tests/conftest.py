"""Shared fixtures of the core's tests: a typed config builder and a tiny local tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if tools %}<tools>{% for t in tools %}{{ t['function']['name'] }};{% endfor %}\n{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def build_config(**sections: dict[str, Any]) -> Any:
    """A validated ``Config`` of the core's sections: ``build_config(data={"path": p})``."""
    from slime_core.builtin.config_sections import SECTIONS
    from slime_core.config import ConfigSchema, load_config
    from slime_hookspecs import ConfigSection

    schema = ConfigSchema()
    for name, cls, doc in SECTIONS:
        schema.add(ConfigSection(name=name, schema=cls, summary=doc))
    return load_config(schema, data=sections)


@pytest.fixture
def make_config():
    """``make_config(data={...}, rollout={...})`` -> a typed ``Config``."""
    return build_config


def write_char_tokenizer(path: Path) -> Path:
    """Save a character-level ``PreTrainedTokenizerFast`` (printable ASCII, ``<eos>``, chat
    template) under ``path``; no network needed."""
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
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny character-level tokenizer (``AutoTokenizer.from_pretrained`` loads it)."""
    return write_char_tokenizer(tmp_path_factory.mktemp("tiny_tokenizer"))
