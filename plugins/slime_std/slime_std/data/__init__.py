"""The data sources of ``core_data``: prompt files (JSONL / JSON / parquet) and reasoning-gym
tasks, both on the core's buffer machinery (:class:`slime_core.api.PromptDataSource`); and the
chat masks of ``core_sft``.

Factories have the ``DataSourceRecord`` signature ``factory(config, split)``; heavy modules
(pyarrow, reasoning_gym, transformers) are imported when a source is built, not here.
"""

from __future__ import annotations

from typing import Any


def make_jsonl_source(config: Any, split: str) -> Any:
    """``data.source = "jsonl"``: a prompt file (type from the extension, JSONL by default)."""
    from slime_std.data.files import FileDataSource

    return FileDataSource(config, split, default_type="jsonl")


def make_parquet_source(config: Any, split: str) -> Any:
    """``data.source = "parquet"``: a prompt file (type from the extension, parquet by default)."""
    from slime_std.data.files import FileDataSource

    return FileDataSource(config, split, default_type="parquet")


def make_reasoning_gym_source(config: Any, split: str) -> Any:
    """``data.source = "reasoning_gym"``: procedural tasks named by ``data.task``."""
    from slime_std.data.reasoning_gym_source import ReasoningGymDataSource

    return ReasoningGymDataSource(config, split)


__all__ = ["make_jsonl_source", "make_parquet_source", "make_reasoning_gym_source"]
