"""Fixtures of the models-kit tests: the tiny Qwen2 of ``slime_core.testing`` and the core's
character tokenizer (``<eos>`` is id 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slime_core.testing import TINY_QWEN2


@pytest.fixture
def tokenizer_dir(tiny_tokenizer_dir: Path) -> Path:
    return tiny_tokenizer_dir


@pytest.fixture
def engine_config(make_config: Any, tokenizer_dir: Path) -> Any:
    """``engine_config(model={...}, ...)`` -> Config of the tiny model."""

    def build(**sections: dict[str, Any]) -> Any:
        model = {"init_config": dict(TINY_QWEN2), "tokenizer": str(tokenizer_dir)}
        model.update(sections.pop("model", {}))
        return make_config(model=model, **sections)

    return build
