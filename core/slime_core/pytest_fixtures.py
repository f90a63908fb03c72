"""pytest fixtures for tests of slime and of plugins (import them into a ``conftest.py``):
``make_config`` builds a typed config, ``tiny_tokenizer_dir`` is a tiny character-level
tokenizer that ``AutoTokenizer.from_pretrained`` loads, ``without`` hides installed modules
from the optional-dependency probes."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
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


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``without("math_verify")``: the module looks uninstalled to the probes."""
    real = importlib.util.find_spec

    def hide(*modules: str) -> None:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name in modules else real(name, *a))

    return hide
