"""Per-sample tensors as one flat tensor: the trainers' bookkeeping works on the packed batch
(one operator for the batch, not one a sample: on a GPU each is a dispatch, often a launch).

The forward computes a micro-batch's log-probs as one packed tensor and hands the loss one
tensor a sample (the data contract); the loss packs them again. :func:`split_samples` makes
that list remember the tensor it was cut from, and :func:`flat_cat` gives that tensor back
instead of concatenating the views anew: no concatenation forward, and no per-sample views in
its backward (a concatenation of 128 samples is 128 narrow operators in the backward pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch


class SampleViews(list):  # type: ignore[type-arg]
    """A list of the 1-D per-sample views of ``packed``, in order, that remembers ``packed``.
    It is a plain list to its readers; once its items are replaced (or the list is extended
    or shortened) it is no longer :meth:`intact` and :func:`flat_cat` concatenates it."""

    __slots__ = ("packed", "_views")

    def __init__(self, packed: torch.Tensor, lengths: Sequence[int]) -> None:
        views = packed.split(list(lengths)) if len(lengths) else ()
        super().__init__(views)
        self.packed = packed
        self._views = tuple(views)

    def intact(self) -> bool:
        """True while the list holds exactly the views it was made with."""
        return len(self) == len(self._views) and all(
            a is b for a, b in zip(self, self._views, strict=True))

    def __reduce__(self) -> tuple[type, tuple[list[torch.Tensor]]]:
        return list, (list(self),)  # pickled (and copied) as the plain list it stands for


def split_samples(packed: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """``packed`` (1-D) cut into consecutive per-sample views of ``lengths`` (which sum to its
    length), as a list that :func:`flat_cat` turns back into ``packed`` itself."""
    if packed.dim() != 1 or int(packed.numel()) != sum(lengths):
        raise ValueError(f"split_samples: a 1-D tensor of {sum(lengths)} values expected, got "
                         f"shape {tuple(packed.shape)}")
    return SampleViews(packed, lengths)


def packed_source(values: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The tensor ``values`` was cut from by :func:`split_samples`, while the list is as it
    was made; None for any other sequence."""
    if isinstance(values, SampleViews) and len(values) and values.intact():
        return values.packed
    return None


def flat_cat(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """``values`` (one tensor a sample, on one device) flattened and concatenated in order;
    mixed dtypes promote as ``torch.cat`` does. A list made by :func:`split_samples` and left
    as it was gives back its packed tensor (the same tensor, not a copy)."""
    packed = packed_source(values)
    if packed is not None:
        return packed
    return torch.cat([v if v.dim() == 1 else v.reshape(-1) for v in values])


def samples_as(values: Sequence[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """``values`` converted to ``dtype`` where they are not of it (a list made by
    :func:`split_samples` is converted packed: one operator, and stays packed)."""
    packed = packed_source(values)
    if packed is not None:
        if packed.dtype == dtype:
            return cast(SampleViews, values)
        return split_samples(packed.to(dtype), [int(v.numel()) for v in values])
    return [v if v.dtype == dtype else v.to(dtype) for v in values]
