"""slime's Megatron model list, usable where a hook expects one ``torch.nn.Module``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


class ModelList(list):  # type: ignore[type-arg]
    """The model chunks (one per virtual pipeline stage), as slime hands them to its Megatron
    hooks, plus ``parameters()`` / ``named_parameters()`` over every chunk: plugins written for
    the torch backend that only ask a model for its parameters or device (slime_ppo builds its
    critic on ``next(model.parameters()).device``) work unchanged."""

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        for chunk in self:
            yield from chunk.parameters()

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        for chunk in self:
            yield from chunk.named_parameters(*args, **kwargs)
