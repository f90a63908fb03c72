"""``data.max_prompt_len``: drop training prompts that are too long, once, when the data loads.

slime's ``--rollout-max-prompt-len`` semantics: a prompt is measured in tokens *after*
templating (``prompt_template``, system prompt, chat template with its tools and
``chat_template_kwargs``), exactly the ids a sample would start with, and a prompt of more
than ``max_prompt_len`` tokens is dropped (one of exactly ``max_prompt_len`` is kept).
``data.max_prompt_len`` filters the train split only; the eval split has its own key,
``eval.max_prompt_len`` (slime's ``--eval-max-prompt-len``), so evaluation numbers stay
comparable between runs that filter training data differently.

The rows that remain are the source's prompts from then on (``len(source)``, epochs, the
stored position); the number dropped is printed to stderr, and a filter that drops every
prompt is an error that gives the shortest prompt's length.

The context is checked at the same time (:func:`context_limit`): a prompt of at least as many
tokens as the context (``rollout.max_context_len``, or the model's ``max_position_embeddings``
read from its config file) leaves no room for a response. Such rows are bad rows
(:mod:`slime_core.data.rowcheck`): reported together, file and line, when the data loads,
before any model does; ``data.skip_bad_rows = true`` trains on the others.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def rows_within(num_rows: int, row_len: Callable[[int], int], max_len: int,
                what: str, key: str = "data.max_prompt_len") -> list[int]:
    """Indices ``i`` in ``range(num_rows)`` whose prompt has at most ``max_len`` tokens
    (``row_len(i)``).

    ``what`` names the data in the messages (``"data.path file 'x.jsonl'"``), ``key`` the
    setting.
    """
    kept: list[int] = []
    shortest: int | None = None
    longest_dropped = 0
    for i in range(num_rows):
        n = row_len(i)
        if n <= max_len:
            kept.append(i)
        else:
            longest_dropped = max(longest_dropped, n)
        shortest = n if shortest is None else min(shortest, n)
    dropped = num_rows - len(kept)
    if num_rows and not kept:
        raise ValueError(
            f"{key} = {max_len} drops all {num_rows} prompts of {what}: the "
            f"shortest is {shortest} tokens after templating; raise {key} "
            "(0: no limit)"
        )
    if dropped:
        print(f"note: {key} = {max_len}: dropped {dropped} of {num_rows} prompts "
              f"of {what} longer than {max_len} tokens after templating (longest "
              f"{longest_dropped}); {len(kept)} remain", file=sys.stderr, flush=True)
    return kept


def describe(source: Any) -> str:
    """How the messages name ``source``'s data: the file, else the source kind and split."""
    path = getattr(source, "path", None)
    if path:
        return f"data.path file {str(path)!r}"
    return f"the {source.kind} data source ({source.split} split)"


def model_max_positions(model_cfg: Any) -> int | None:
    """The model's ``max_position_embeddings`` from ``model.init_config`` or the
    ``config.json`` of a local ``model.path`` (its top level, else its ``text_config``); no
    weights are read. ``None`` when it cannot be known here (a hub name, no such key)."""
    cfg: Any = dict(model_cfg.init_config or {})
    if not cfg and model_cfg.path:
        try:
            cfg = json.loads((Path(model_cfg.path) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # not a local checkpoint: the engine checks each prompt instead
    if not isinstance(cfg, dict):
        return None
    n = cfg.get("max_position_embeddings")
    if n is None and isinstance(cfg.get("text_config"), dict):
        n = cfg["text_config"].get("max_position_embeddings")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def context_limit(config: Any) -> tuple[int, str] | None:
    """``(tokens, what)``: a prompt must be shorter than ``tokens`` to leave room for a
    response; ``what`` names the setting (the smaller of ``rollout.max_context_len`` and the
    model's ``max_position_embeddings``). ``None`` when neither is known."""
    limits: list[tuple[int, str]] = []
    if config.rollout.max_context_len > 0:
        n = int(config.rollout.max_context_len)
        limits.append((n, f"rollout.max_context_len = {n}"))
    model_n = model_max_positions(config.model)
    if model_n is not None:
        limits.append((model_n, f"the model's max_position_embeddings = {model_n}"))
    return min(limits) if limits else None
