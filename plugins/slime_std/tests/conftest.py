"""Fixtures of slime-std's tests: the core's (a typed config builder, a tiny tokenizer)."""

from __future__ import annotations

from slime_core.pytest_fixtures import make_config, tiny_tokenizer_dir, without

__all__ = ["make_config", "tiny_tokenizer_dir", "without"]
