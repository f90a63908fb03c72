"""Rollout/training mismatch corrections (importance sampling between engine and trainer).

The rollout engine samples with pi_rollout (``rollout_log_probs``), the trainer recomputes
pi_old (``train_log_probs``); the policy loss is corrected with weights of
``rho_t = pi_old / pi_rollout = exp(train_log_probs - rollout_log_probs)``.

Every function has the signature of slime's custom TIS hook (``--custom-tis-function-path``,
our ``slime_is_correction``)::

    fn(config, pg_loss, train_log_probs, rollout_log_probs, loss_masks, **kwargs)
        -> (pg_loss * weights, loss_masks_out, metrics)

* ``config``: a Mapping or attribute object (argparse.Namespace, dataclass) or None; keys
  ``tis_clip`` (upper bound C, default 2.0) and ``tis_clip_low`` (lower bound, default 0.0),
  slime's names and defaults;
* ``pg_loss``: the per-token policy loss, packed ``[sum T_i]`` (slime) or a list of ``[T_i]``;
  it comes back in the same form, multiplied by the weights;
* ``train_log_probs``, ``rollout_log_probs``, ``loss_masks``: lists of ``[T_i]``;
* extra keyword arguments of slime's hook (``total_lengths``, ``response_lengths``, ``args``) are
  accepted and ignored; ``metric_reducer`` (optional) reduces the metrics instead of the token mean.

The weights are detached (they carry no gradient). ``loss_masks_out`` equals ``loss_masks``
except for the rejection methods (``icepop``, ``seq_mask_tis``), where rejected tokens are 0.
Rejected tokens already have loss 0; to keep them in the denominators as slime does, build the
reducer with ``denominator_masks=<original loss masks>`` (verl drops them from the denominator).

Metrics (0-dim, detached; token mean over the *original* loss-masked tokens):
``tis`` (mean applied weight), ``tis_ratio`` (mean raw ratio before truncation or masking),
``tis_clipfrac`` (fraction of tokens whose weight differs from the raw ratio: truncated or
rejected), ``mismatch_abs_logprob_diff`` (mean ``|train - rollout|`` log-prob).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ._batch import cfg_get, float_masks, lengths_of, masked_token_mean, pack, unpack

TIS_CLIP = 2.0
TIS_CLIP_LOW = 0.0
SEQ_LOG_RATIO_BOUND = 20.0

ISResult = tuple[Tensor | list[Tensor], list[Tensor], dict[str, Tensor]]
ISCorrection = Callable[..., ISResult]


def _prepare(
    pg_loss: Tensor | Sequence[Tensor],
    train_log_probs: Sequence[Tensor],
    rollout_log_probs: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
) -> tuple[list[int], list[Tensor], list[Tensor]]:
    lengths = lengths_of(train_log_probs)
    if lengths_of(rollout_log_probs) != lengths or lengths_of(loss_masks) != lengths:
        raise ValueError(
            "IS correction: train_log_probs, rollout_log_probs and loss_masks differ in lengths"
        )
    n_loss = int(pg_loss.numel()) if isinstance(pg_loss, Tensor) else sum(lengths_of(pg_loss))
    if n_loss != sum(lengths):
        raise ValueError(
            f"IS correction: pg_loss has {n_loss} tokens, the masks have {sum(lengths)}"
        )
    log_diff = [
        (t.detach().float() - r.detach().float())
        for t, r in zip(train_log_probs, rollout_log_probs, strict=True)
    ]
    return lengths, log_diff, float_masks(loss_masks)


def _finish(
    pg_loss: Tensor | Sequence[Tensor],
    weights: list[Tensor],
    raw: list[Tensor],
    masks: list[Tensor],
    masks_out: list[Tensor],
    log_diff: list[Tensor],
    lengths: list[int],
    metric_reducer: Callable[[Sequence[Tensor]], Tensor] | None,
) -> ISResult:
    w = pack(weights).detach()
    if isinstance(pg_loss, Tensor):
        corrected: Tensor | list[Tensor] = pg_loss * w.to(pg_loss.device, pg_loss.dtype)
    else:
        corrected = [
            p * wi.to(p.device, p.dtype) for p, wi in zip(pg_loss, unpack(w, lengths), strict=True)
        ]
    per_token = {
        "tis": weights,
        "tis_ratio": raw,
        "tis_clipfrac": [(wi != ri).float() for wi, ri in zip(weights, raw, strict=True)],
        "mismatch_abs_logprob_diff": [d.abs() for d in log_diff],
    }
    metrics = {
        k: (
            metric_reducer(v) if metric_reducer is not None else masked_token_mean(v, masks)
        ).detach()
        for k, v in per_token.items()
    }
    return corrected, masks_out, metrics


def _bounds(config: Any) -> tuple[float, float]:
    high = float(cfg_get(config, "tis_clip", TIS_CLIP))
    low = float(cfg_get(config, "tis_clip_low", TIS_CLIP_LOW))
    if not low < high:
        raise ValueError(f"IS correction needs tis_clip_low < tis_clip, got {low} and {high}")
    return low, high


def tis(
    config: Any,
    pg_loss: Tensor | Sequence[Tensor],
    train_log_probs: Sequence[Tensor],
    rollout_log_probs: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    metric_reducer: Callable[[Sequence[Tensor]], Tensor] | None = None,
    **kwargs: Any,
) -> ISResult:
    """Token-level truncated IS (slime's ``vanilla_tis_function``).

    ``w_t = clamp(exp(train_t - rollout_t), min=tis_clip_low, max=tis_clip)`` (defaults 0 and 2,
    so ``w_t = min(rho_t, 2)``); no clamp on the log-difference. Masks unchanged.
    """
    lengths, log_diff, masks = _prepare(pg_loss, train_log_probs, rollout_log_probs, loss_masks)
    low, high = _bounds(config)
    raw = [torch.exp(d) for d in log_diff]
    weights = [r.clamp(min=low, max=high) for r in raw]
    return _finish(
        pg_loss, weights, raw, masks, list(loss_masks), log_diff, lengths, metric_reducer
    )


def seq_tis(
    config: Any,
    pg_loss: Tensor | Sequence[Tensor],
    train_log_probs: Sequence[Tensor],
    rollout_log_probs: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    metric_reducer: Callable[[Sequence[Tensor]], Tensor] | None = None,
    **kwargs: Any,
) -> ISResult:
    """Sequence-level truncated IS: one weight per sequence, broadcast to its tokens.

    ``rho_i = exp(clamp(sum_t m_it (train_it - rollout_it), -20, 20))`` (product of the token
    ratios over loss-masked tokens, with the [-20, 20] safety bound of slime's mis.py and verl);
    ``w_i = clamp(rho_i, min=tis_clip_low, max=tis_clip)``. Masks unchanged.
    """
    lengths, log_diff, masks = _prepare(pg_loss, train_log_probs, rollout_log_probs, loss_masks)
    low, high = _bounds(config)
    raw = []
    for d, m in zip(log_diff, masks, strict=True):
        seq = (d * m.to(d.device)).sum().clamp(-SEQ_LOG_RATIO_BOUND, SEQ_LOG_RATIO_BOUND)
        raw.append(torch.exp(seq).expand(d.shape).clone())
    weights = [r.clamp(min=low, max=high) for r in raw]
    return _finish(
        pg_loss, weights, raw, masks, list(loss_masks), log_diff, lengths, metric_reducer
    )


def icepop(
    config: Any,
    pg_loss: Tensor | Sequence[Tensor],
    train_log_probs: Sequence[Tensor],
    rollout_log_probs: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    metric_reducer: Callable[[Sequence[Tensor]], Tensor] | None = None,
    **kwargs: Any,
) -> ISResult:
    """IcePop: token-level IS with rejection outside ``[tis_clip_low, tis_clip]``.

    ``w_t = rho_t`` if ``tis_clip_low <= rho_t <= tis_clip`` (inclusive) else 0 (slime's
    ``icepop_function``, OpenRLHF's ``icepop``). Rejected tokens get mask 0 in ``loss_masks_out``.
    """
    lengths, log_diff, masks = _prepare(pg_loss, train_log_probs, rollout_log_probs, loss_masks)
    low, high = _bounds(config)
    raw = [torch.exp(d) for d in log_diff]
    keep = [(r >= low) & (r <= high) for r in raw]
    weights = [torch.where(k, r, torch.zeros_like(r)) for k, r in zip(keep, raw, strict=True)]
    masks_out = [m * k.to(m.device, m.dtype) for m, k in zip(masks, keep, strict=True)]
    return _finish(pg_loss, weights, raw, masks, masks_out, log_diff, lengths, metric_reducer)


def seq_mask_tis(
    config: Any,
    pg_loss: Tensor | Sequence[Tensor],
    train_log_probs: Sequence[Tensor],
    rollout_log_probs: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    metric_reducer: Callable[[Sequence[Tensor]], Tensor] | None = None,
    **kwargs: Any,
) -> ISResult:
    """Sequence rejection on the geometric-mean ratio, token TIS weights on kept sequences.

    ``g_i = exp(sum_t m_it (train_it - rollout_it) / max(sum_t m_it, 1))``; a sequence with
    ``g_i`` outside ``[tis_clip_low, tis_clip]`` is rejected (all its weights and mask entries 0);
    kept sequences use ``w_t = clamp(rho_t, tis_clip_low, tis_clip)`` (the ``tis`` weight).
    This is OpenRLHF's ``seq-mask-tis`` (whose code applies the raw, unclamped ``rho_t`` to
    kept sequences although its comment says TIS); verl's "Seq-MIS" preset instead filters on
    the product ratio.
    """
    lengths, log_diff, masks = _prepare(pg_loss, train_log_probs, rollout_log_probs, loss_masks)
    low, high = _bounds(config)
    raw = [torch.exp(d) for d in log_diff]
    weights, masks_out = [], []
    for d, r, m in zip(log_diff, raw, masks, strict=True):
        md = m.to(d.device)
        geo = torch.exp((d * md).sum() / torch.clamp_min(md.sum(), 1.0))
        keep = bool(low <= geo.item() <= high)
        weights.append(r.clamp(min=low, max=high) if keep else torch.zeros_like(r))
        masks_out.append(m if keep else torch.zeros_like(m))
    return _finish(pg_loss, weights, raw, masks, masks_out, log_diff, lengths, metric_reducer)


IS_CORRECTIONS: dict[str, ISCorrection] = {
    "tis": tis,
    "seq_tis": seq_tis,
    "icepop": icepop,
    "seq_mask_tis": seq_mask_tis,
}
"""Name -> mismatch correction, all with slime's custom TIS hook signature."""
