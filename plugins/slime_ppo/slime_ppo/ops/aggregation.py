"""Local loss reducers for the critic (slime_ppo does not depend on slime_grpo).

Same names and denominators as ``slime_grpo.ops.get_reducer`` (N = number of samples,
m_it = loss mask, x_it = per-token value):

* ``token_mean``: sum_i sum_t m_it x_it / max(sum_i sum_t m_it, 1)
* ``seq_mean_token_mean`` (default, slime): (1/N) sum_i sum_t m_it x_it / max(sum_t m_it, 1);
  a sample without loss-masked tokens contributes 0 and still counts in N
* ``seq_mean_token_sum``: (1/N) sum_i sum_t m_it x_it
* ``seq_mean_token_sum_norm``: (1/N) sum_i sum_t m_it x_it / max_response_length (a constant)

Any callable ``reduce(list_of_[T_i] or packed [sum T_i]) -> 0-dim tensor`` can be passed to
``value_loss`` instead, e.g. the trainer's own reducer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

Reducer = Callable[[Sequence[Tensor] | Tensor], Tensor]

LOSS_AGG_MODES: tuple[str, ...] = (
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
)
DEFAULT_LOSS_AGG_MODE = "seq_mean_token_mean"


def get_reducer(
    name: str,
    response_lengths: Sequence[int],
    loss_masks: Sequence[Tensor],
    *,
    max_response_length: int | None = None,
) -> Reducer:
    """Build reducer ``name`` (``LOSS_AGG_MODES``, dashes accepted) from the batch's loss masks.

    ``response_lengths``: ``T_i`` per sample; ``loss_masks``: list of ``[T_i]`` 0/1 masks;
    ``max_response_length``: the constant of ``seq_mean_token_sum_norm`` (required there).
    The returned ``reduce(x)`` accepts a list of ``[T_i]`` or a packed ``[sum T_i]`` tensor and
    keeps the autograd graph.
    """
    mode = name.replace("-", "_")
    if mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"unknown loss aggregation mode {name!r}; choose one of: {', '.join(LOSS_AGG_MODES)}"
        )
    if mode == "seq_mean_token_sum_norm" and (
        max_response_length is None or max_response_length <= 0
    ):
        raise ValueError("seq_mean_token_sum_norm needs a positive constant max_response_length")
    lengths = [int(n) for n in response_lengths]
    masks = [torch.as_tensor(m).float() for m in loss_masks]
    if [int(m.numel()) for m in masks] != lengths:
        raise ValueError(
            f"loss mask lengths {[int(m.numel()) for m in masks]} != response lengths {lengths}"
        )
    counts = [max(float(m.sum().item()), 1.0) for m in masks]  # denominators, read once
    total = max(float(sum(m.sum().item() for m in masks)), 1.0)

    def reduce(x: Sequence[Tensor] | Tensor) -> Tensor:
        parts = list(torch.split(x, lengths)) if isinstance(x, Tensor) else list(x)
        if [int(p.numel()) for p in parts] != lengths:
            raise ValueError(
                f"reducer input lengths {[int(p.numel()) for p in parts]}, expected {lengths}"
            )
        if not parts:
            return torch.zeros(())
        sums = [(p * m.to(p.device, p.dtype)).sum() for p, m in zip(parts, masks, strict=True)]
        if mode == "token_mean":
            return torch.stack(sums).sum() / total
        if mode == "seq_mean_token_mean":
            per = [s / c for s, c in zip(sums, counts, strict=True)]
        elif mode == "seq_mean_token_sum":
            per = sums
        else:
            per = [s / float(max_response_length) for s in sums]  # type: ignore[arg-type]
        return torch.stack(per).sum() / len(per)

    return reduce
