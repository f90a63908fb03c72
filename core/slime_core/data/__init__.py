"""The data machinery the core runs: the prompt buffer every prompt source builds on (epochs,
seeded shuffle, return buffer, resume: :mod:`.base`), prompt templating (:mod:`.prompts`), the
prompt length filter, the row checks and JSON-safe values.

The data sources themselves are records; the standard ones (``jsonl``, ``parquet``,
``reasoning_gym``) are the default plugin ``core_data`` of slime-std.
"""

from __future__ import annotations

from slime_core.data.base import STATE_FORMAT, PromptDataSource, PromptRow
from slime_core.data.prompts import PromptEncoder

__all__ = ["STATE_FORMAT", "PromptDataSource", "PromptEncoder", "PromptRow"]
