"""Masked advantage whitening (slime's ``distributed_masked_whiten``), on one process or over
data-parallel ranks through an ``all_sum`` callback
(:func:`slime_core.trainkit.data_parallel.float_all_sum`).

One implementation for every algorithm plugin (``slime_grpo.ops.whiten`` and
``slime_ppo.ops.whiten`` re-export it), so both whiten alike, on one rank or several.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

WHITEN_EPS = 1e-8
AllSum = Callable[[list[float]], list[float]]


def whiten(
    values: Tensor | Sequence[Tensor],
    mask: Tensor | Sequence[Tensor],
    shift_mean: bool = True,
    eps: float = WHITEN_EPS,
    all_sum: AllSum | None = None,
) -> Tensor | list[Tensor]:
    """Whiten ``values`` with statistics taken over the positions where ``mask`` is non-zero.

    Formula (n = sum(mask) over the whole batch)::

        mu  = sum(m * x) / n
        var = sum(m * (x - mu)^2) / (n - 1)                 # Bessel's correction; / n when n == 1
        out = (x - mu) / sqrt(var + eps)                    # eps = 1e-8, added to the variance
        if not shift_mean: out = out + mu                   # slime keeps the mean in that case

    Every position is transformed (masked ones too: they are expected to be ignored by the
    loss). Shapes: a packed ``[T]`` tensor with a ``[T]`` mask, or per-sample lists of ``[T_i]``
    tensors (the statistics are pooled over all samples; a list comes back as a list).

    ``all_sum``: under data parallelism, a callback that sums a list of floats over every rank
    (each rank calls it the same number of times, also a rank whose share is empty). The
    statistics are then those of the whole batch: the mean from the summed ``sum(m * x)`` and
    ``n``, then the variance from the summed ``sum(m * (x - mu)^2)`` (two rounds, the same
    two-pass formula as on one process).

    Raises:
        ValueError: when the mask selects no position (slime raises too: the mean is undefined).
    """
    lengths: list[int] | None = None
    if isinstance(values, Tensor):
        flat = values
        flat_mask = torch.as_tensor(mask if isinstance(mask, Tensor) else torch.cat(list(mask)))
    else:
        lengths = [int(v.numel()) for v in values]
        masks = [mask] if isinstance(mask, Tensor) else list(mask)
        flat = torch.cat(list(values)) if lengths else torch.zeros(0)
        flat_mask = torch.cat([torch.as_tensor(m) for m in masks]) if lengths else torch.zeros(0)
    if flat.shape != flat_mask.shape:
        raise ValueError(
            f"values {tuple(flat.shape)} and mask {tuple(flat_mask.shape)} differ in shape"
        )
    m = flat_mask.to(flat.device, torch.float32)
    x = flat.float()
    if all_sum is None:
        n = m.sum()
        if n.item() == 0:
            raise ValueError("whiten: the mask selects no token, mean and variance are undefined")
        mean = (x * m).sum() / n
        var = ((x - mean) ** 2 * m).sum() / (n - 1 if n.item() >= 2 else n)
    else:
        total, count = all_sum([float((x * m).sum()), float(m.sum())])
        if count == 0:
            raise ValueError("whiten: the mask selects no token on any rank, mean and variance "
                             "are undefined")
        mean = torch.tensor(total / count, dtype=torch.float32, device=x.device)
        (squares,) = all_sum([float(((x - mean) ** 2 * m).sum())])
        var = torch.tensor(squares / (count - 1 if count >= 2 else count),
                           dtype=torch.float32, device=x.device)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    out = out.to(flat.dtype)
    if lengths is not None:
        return list(torch.split(out, lengths))
    return out
