"""Built-in data sources: prompt files (JSONL / JSON / parquet) and reasoning-gym tasks.

Factories have the ``DataSourceRecord`` signature ``factory(config, split)``; heavy modules
(pyarrow, reasoning_gym, transformers) are imported when a source is built, not here.
"""

from __future__ import annotations

from typing import Any

from slime_core.data.base import STATE_FORMAT, PromptDataSource, PromptRow
from slime_core.data.prompts import PromptEncoder


def make_jsonl_source(config: Any, split: str) -> PromptDataSource:
    """``data.source = "jsonl"``: a prompt file (type from the extension, JSONL by default)."""
    from slime_core.data.files import FileDataSource

    return FileDataSource(config, split, default_type="jsonl")


def make_parquet_source(config: Any, split: str) -> PromptDataSource:
    """``data.source = "parquet"``: a prompt file (type from the extension, parquet by default)."""
    from slime_core.data.files import FileDataSource

    return FileDataSource(config, split, default_type="parquet")


def make_reasoning_gym_source(config: Any, split: str) -> PromptDataSource:
    """``data.source = "reasoning_gym"``: procedural tasks named by ``data.task``."""
    from slime_core.data.reasoning_gym_source import ReasoningGymDataSource

    return ReasoningGymDataSource(config, split)


__all__ = [
    "STATE_FORMAT",
    "PromptDataSource",
    "PromptEncoder",
    "PromptRow",
    "make_jsonl_source",
    "make_parquet_source",
    "make_reasoning_gym_source",
]
