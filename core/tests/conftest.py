"""Shared fixtures of the core's tests: a typed config builder and a tiny local tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slime_core.testing import CHAT_TEMPLATE, write_char_tokenizer

__all__ = ["CHAT_TEMPLATE", "build_config", "write_char_tokenizer"]

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


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny character-level tokenizer (``AutoTokenizer.from_pretrained`` loads it)."""
    return write_char_tokenizer(tmp_path_factory.mktemp("tiny_tokenizer"))
