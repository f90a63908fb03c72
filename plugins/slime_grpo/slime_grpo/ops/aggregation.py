"""Loss reducers: turn a per-token loss (per-sample list or packed tensor) into a scalar.

A reducer is built once per batch from the loss masks, ``get_reducer(name, response_lengths,
loss_masks)``, and then applied to any per-token quantity (policy loss, entropy, KL, clipfrac),
exactly like slime's ``sum_of_sample_mean`` closure.

Denominators (N = number of samples, m_it = loss mask, x_it = per-token value):

======================== =====================================================================
``token_mean``           sum_i sum_t m_it x_it / max(sum_i sum_t m_it, 1)
``seq_mean_token_mean``  (1/N) sum_i [ sum_t m_it x_it / max(sum_t m_it, 1) ]   (default, slime)
``seq_mean_token_sum``   (1/N) sum_i sum_t m_it x_it
``seq_mean_token_sum_norm`` (1/N) sum_i sum_t m_it x_it / max_response_length  (Dr. GRPO)
======================== =====================================================================

Conventions:

* A sample whose loss mask is all zero contributes 0 to the numerator and still counts in
  N (slime divides by the step's sample count; verl instead drops fully masked sequences
  from N in its ``seq-mean-*`` modes: ``count_empty_samples=False``).
* ``rollout_ids`` (optional, one per sample): the "sequence" unit of the ``seq_*`` modes becomes
  the rollout: samples sharing an id are pooled (their masked sums added, their mask counts
  added) and N is the number of distinct ids. This is slime's per-rollout mean for multi-turn
  rollouts split into several samples. Without it each sample is its own rollout.
* ``denominator_masks`` (optional): masks used for the denominators only. Pass the original
  loss masks here when ``loss_masks`` are rejection-modified masks returned by an IS correction:
  rejected tokens then count as zeros in the mean, as slime does (verl drops them instead,
  which is what you get by leaving this unset).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._batch import check_lengths, float_masks, pack

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
    rollout_ids: Sequence[int] | None = None,
    denominator_masks: Sequence[Tensor] | None = None,
    count_empty_samples: bool = True,
) -> Reducer:
    """Build the reducer ``name`` for one batch (see the module docstring for the formulas).

    Args:
        name: one of ``LOSS_AGG_MODES`` (dashes are accepted: ``seq-mean-token-mean``).
        response_lengths: ``T_i`` per sample; a packed input is split with these lengths.
        loss_masks: per-sample ``[T_i]`` 0/1 masks (bool, int or float) for the numerators.
        max_response_length: the constant divisor of ``seq_mean_token_sum_norm`` (required there).
        rollout_ids: optional rollout id per sample (pools samples of one rollout, see module doc).
        denominator_masks: optional masks for the denominators (default: ``loss_masks``).
        count_empty_samples: whether a sample (rollout) without a masked-in token counts in N of
            the ``seq_*`` modes (slime: yes; verl: no, ``algorithm.count_empty_samples``).

    Returns:
        ``reduce(x)`` where ``x`` is a list of ``[T_i]`` tensors or one packed ``[sum T_i]``
        tensor; returns a 0-dim tensor that keeps the autograd graph of ``x``.
    """
    mode = name.replace("-", "_")
    if mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"unknown loss aggregation mode {name!r}; choose one of: {', '.join(LOSS_AGG_MODES)}"
        )
    lengths = [int(n) for n in response_lengths]
    masks = float_masks(loss_masks)
    check_lengths("loss_masks", masks, lengths)
    denom_masks = masks if denominator_masks is None else float_masks(denominator_masks)
    check_lengths("denominator_masks", denom_masks, lengths)
    if mode == "seq_mean_token_sum_norm":
        if max_response_length is None or max_response_length <= 0:
            raise ValueError(
                "seq_mean_token_sum_norm needs a positive constant max_response_length"
            )

    num_samples = len(lengths)
    if rollout_ids is None:
        unit = torch.arange(num_samples)
    else:
        if len(rollout_ids) != num_samples:
            raise ValueError(
                f"rollout_ids has {len(rollout_ids)} entries for {num_samples} samples"
            )
        unit = torch.unique(torch.as_tensor(list(rollout_ids)).long(), return_inverse=True)[1]
    num_units = int(unit.max().item()) + 1 if num_samples else 0
    # Per-sample sums as one segment sum over the packed tokens (a handful of kernels whatever
    # the batch size; a per-sample loop cost three kernels per sample and call, thousands per
    # training step on a GPU). Segment ids and packed masks are built once per device/dtype.
    segments = torch.repeat_interleave(torch.arange(num_samples),
                                       torch.tensor(lengths, dtype=torch.long))
    flat_masks = pack(masks)  # 1-D each (check_lengths)
    flat_denom = flat_masks if denominator_masks is None else pack(denom_masks)
    # one device-to-host copy for the batch, not one per sample
    mask_counts = torch.zeros(num_samples, dtype=flat_denom.dtype, device=flat_denom.device
                              ).index_add_(0, segments.to(flat_denom.device), flat_denom).cpu()
    unit_counts = torch.zeros(num_units).index_add_(0, unit, mask_counts)
    total_tokens = mask_counts.sum()
    # the N of the seq_* modes: every unit (slime), or only units with a masked-in token (verl)
    num_mean = num_units if count_empty_samples else int((unit_counts > 0).sum().item())

    placed: dict[tuple[torch.device, torch.dtype], tuple[Tensor, ...]] = {}

    def on(device: torch.device, dtype: torch.dtype) -> tuple[Tensor, ...]:
        """(segments, masks, unit, unit_counts, total_tokens) on ``device``; host-to-device
        copies wait for the device queue, so each is made once per reducer, not per call."""
        key = (device, dtype)
        if key not in placed:
            placed[key] = (segments.to(device), flat_masks.to(device, dtype), unit.to(device),
                           torch.clamp_min(unit_counts, 1.0).to(device, dtype),
                           torch.clamp_min(total_tokens, 1.0).to(device, dtype))
        return placed[key]

    def reduce(x: Sequence[Tensor] | Tensor) -> Tensor:
        if isinstance(x, Tensor):
            if x.dim() != 1 or x.numel() != sum(lengths):
                raise ValueError(
                    f"packed input has shape {tuple(x.shape)}, expected ({sum(lengths)},)"
                )
            flat = x
        else:
            parts = x if isinstance(x, Sequence) else list(x)
            check_lengths("reducer input", parts, lengths)
            flat = pack(parts)  # the packed tensor itself for the views of one (a loss's)
        if num_samples == 0:
            return torch.zeros(())
        seg, m, unit_d, unit_counts_d, total_d = on(flat.device, flat.dtype)
        sums = torch.zeros(num_samples, dtype=flat.dtype, device=flat.device).index_add(
            0, seg, flat * m
        )
        if mode == "token_mean":
            return sums.sum() / total_d
        unit_sums = torch.zeros(num_units, dtype=sums.dtype, device=sums.device).index_add_(
            0, unit_d, sums
        )
        if mode == "seq_mean_token_mean":
            per_unit = unit_sums / unit_counts_d
        elif mode == "seq_mean_token_sum":
            per_unit = unit_sums
        else:  # seq_mean_token_sum_norm
            per_unit = unit_sums / float(max_response_length)  # type: ignore[arg-type]
        return per_unit.sum() / max(num_mean, 1)

    return reduce
