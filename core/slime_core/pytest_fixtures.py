"""pytest fixtures for tests of slime and of plugins (import them into a ``conftest.py``):
``make_config`` builds a typed config, ``tiny_tokenizer_dir`` is a tiny character-level
tokenizer that ``AutoTokenizer.from_pretrained`` loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slime_core.testing import build_test_config, write_char_tokenizer


@pytest.fixture
def make_config() -> Any:
    """``make_config(data={...}, rollout={...})`` -> a typed ``Config``."""
    return build_test_config


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny character-level tokenizer (``AutoTokenizer.from_pretrained`` loads it)."""
    return write_char_tokenizer(tmp_path_factory.mktemp("tiny_tokenizer"))
