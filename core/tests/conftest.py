"""Shared fixtures of the core's tests: a typed config builder and a tiny local tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from slime_core.testing import CHAT_TEMPLATE, build_test_config, write_char_tokenizer

__all__ = ["CHAT_TEMPLATE", "build_config", "write_char_tokenizer"]

build_config = build_test_config


@pytest.fixture
def make_config():
    """``make_config(data={...}, rollout={...})`` -> a typed ``Config``."""
    return build_config


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny character-level tokenizer (``AutoTokenizer.from_pretrained`` loads it)."""
    return write_char_tokenizer(tmp_path_factory.mktemp("tiny_tokenizer"))
