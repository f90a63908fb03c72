"""Shared fixtures of the core's tests: a typed config builder and a tiny local tokenizer."""

from __future__ import annotations

from slime_core.pytest_fixtures import make_config, tiny_tokenizer_dir, without
from slime_core.testing import CHAT_TEMPLATE, build_test_config, write_char_tokenizer

__all__ = ["CHAT_TEMPLATE", "build_config", "make_config", "tiny_tokenizer_dir", "without",
           "write_char_tokenizer"]

build_config = build_test_config
