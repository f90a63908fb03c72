"""A dynamic KV cache that writes into one buffer per layer instead of concatenating.

transformers' ``DynamicLayer`` appends each step's keys and values with ``torch.cat``, so a
generation of ``n`` tokens copies the whole cache ``n`` times (quadratic traffic; on a CPU it
was the largest single cost of a small model's decode step, above the matrix products). Here
each layer allocates ``[batch, heads, capacity, head_dim]`` once (``capacity`` = prompt width +
``max_new``), copies a step's entries into the next free columns and exposes ``keys`` /
``values`` as views of the filled prefix. The attention sees the same tensors (values and
length) as with concatenation; only their storage differs. Dropping finished rows selects
rows of the buffers.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers.cache_utils import DynamicLayer


class BufferedLayer(DynamicLayer):
    """``DynamicLayer`` over a preallocated buffer (grows by doubling if ever exceeded)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, int(capacity))
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, hk, _, dk = key_states.shape
        hv, dv = value_states.shape[1], value_states.shape[-1]
        self._k = key_states.new_empty((b, hk, self.capacity, dk))
        self._v = value_states.new_empty((b, hv, self.capacity, dv))
        self.length = 0
        self._expose()
        self.is_initialized = True

    def _expose(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys = self._k[:, :, : self.length]
        self.values = self._v[:, :, : self.length]

    def _grow(self, need: int) -> None:
        assert self._k is not None and self._v is not None
        cap = max(need, 2 * self.capacity)
        k = self._k.new_empty((*self._k.shape[:2], cap, self._k.shape[-1]))
        v = self._v.new_empty((*self._v.shape[:2], cap, self._v.shape[-1]))
        k[:, :, : self.length] = self._k[:, :, : self.length]
        v[:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v, self.capacity = k, v, cap

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self._k is not None and self._v is not None
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            self._grow(end)
        self._k[:, :, self.length:end] = key_states
        self._v[:, :, self.length:end] = value_states
        self.length = end
        self._expose()
        return cast(torch.Tensor, self.keys), cast(torch.Tensor, self.values)  # set by _expose

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized and self._k is not None and self._v is not None:
            self._k = self._k.index_select(0, indices)
            self._v = self._v.index_select(0, indices)
            self._expose()

    def reset(self) -> None:
        self.length = 0
        self._k = self._v = None
        super().reset()


def buffer_layers(cache: Any, capacity: int) -> bool:
    """Swap the plain ``DynamicLayer`` layers of an empty ``cache`` for :class:`BufferedLayer`;
    False (cache untouched) when any layer is of another kind (sliding window, ...)."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or layer.is_initialized
                         for layer in layers):
        return False
    cache.layers = [BufferedLayer(capacity) for _ in layers]
    return True
