"""``RoutedExperts``: the experts a mixture-of-experts model routed each token to.

Rollout routing replay ("R3", ``train.routing_replay = "rollout"``) makes the training forward
use the experts the rollout engine chose instead of the trainer router's own top-k. The engine
records them here, one per sample (``Sample.rollout_routed_experts``,
``GenerateOutput.routed_experts``).

Layout: ``shape = (positions, layers, top_k)``, row-major, little-endian integers of
``dtype`` (``"uint8"`` when the model has at most 256 experts, else ``"int16"``).
``positions == len(sample.tokens) - 1``: position ``p`` is the routing of the forward step
that read token ``p`` (prompt tokens included), for every token but the last, which no
forward reads during generation and whose output predicts nothing in training. ``layers``
counts the model's MoE layers in order (dense layers are skipped); each row holds the
``top_k`` expert ids in the router's own order (descending gate). Torch-free: bytes pickle
and travel cheaply; :meth:`to_dict` is JSON-ready (base64).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

DTYPES = {"uint8": 1, "int16": 2}


@dataclass(frozen=True)
class RoutedExperts:
    """Top-k expert ids of every (position, MoE layer); see the module docstring."""

    shape: tuple[int, int, int]  # (positions, MoE layers, top_k)
    dtype: str  # "uint8" or "int16"
    data: bytes  # row-major little-endian ids, prod(shape) * itemsize bytes

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"RoutedExperts.dtype {self.dtype!r} is not one of {sorted(DTYPES)}")
        shape = tuple(int(x) for x in self.shape)
        if len(shape) != 3 or any(x < 0 for x in shape):
            raise ValueError(f"RoutedExperts.shape {self.shape!r} is not (positions, layers, top_k)")
        object.__setattr__(self, "shape", shape)
        want = shape[0] * shape[1] * shape[2] * DTYPES[self.dtype]
        if len(self.data) != want:
            raise ValueError(f"RoutedExperts of shape {shape} and dtype {self.dtype} needs "
                             f"{want} bytes, got {len(self.data)}")

    @property
    def nbytes(self) -> int:
        """Size of the ids (the record's cost per sample, in memory and in transit)."""
        return len(self.data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"shape": [...], "dtype": ..., "data": base64}``."""
        return {"shape": list(self.shape), "dtype": self.dtype,
                "data": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoutedExperts:
        """Inverse of :meth:`to_dict` (``data`` may also be raw bytes)."""
        raw = data["data"]
        raw = raw if isinstance(raw, (bytes, bytearray)) else base64.b64decode(raw)
        return cls(shape=tuple(data["shape"]), dtype=str(data["dtype"]),  # type: ignore[arg-type]
                   data=bytes(raw))
