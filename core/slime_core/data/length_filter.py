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
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any


def rows_within(num_rows: int, row_ids: Callable[[int], Sequence[int]], max_len: int,
                what: str, key: str = "data.max_prompt_len") -> list[int]:
    """Indices ``i`` in ``range(num_rows)`` whose ``row_ids(i)`` has at most ``max_len`` ids.

    ``what`` names the data in the messages (``"data.path file 'x.jsonl'"``), ``key`` the
    setting.
    """
    kept: list[int] = []
    shortest: int | None = None
    longest_dropped = 0
    for i in range(num_rows):
        n = len(row_ids(i))
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
