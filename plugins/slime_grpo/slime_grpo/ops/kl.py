"""Per-token KL estimators between the policy and a reference (Schulman, "Approximating KL").

All take ``log_probs`` and ``ref_log_probs`` of the same shape (``[T]``, packed or per sample)
and return a float32 tensor of that shape; the gradient flows through both inputs.

Convention (slime's ``compute_approx_kl``, k1 = log pi - log pi_ref):

* ``k1`` = log p - log p_ref                       (unbiased, can be negative)
* ``k2`` = (log p - log p_ref)^2 / 2
* ``k3`` = exp(-k1) - 1 + k1 = p_ref/p - 1 - log(p_ref/p), then clamped to [-10, 10]
  (``low_var_kl`` is the same function). There is no clamp on the log-ratio before ``exp``.
* ``importance_ratio`` (optional, same shape, e.g. pi_theta / pi_old for the unbiased KL of
  DeepSeek-V3.2) multiplies the estimate before the k3 clamp, as in slime.

Differences: slime clamps only the name ``low_var_kl`` (its ``k3`` is unclamped); here both
names are one function and both clamp (the design of record fixes k3 = low_var_kl with the
clamp). The clamp only acts when k3 > 10, i.e. k1 < about -2.6 or k1 > 11. verl additionally
clamps the log-ratio to [-20, 20] before ``exp``; OpenRLHF clamps every estimator (k1 and k2
too) to [-10, 10]; TRL's GRPO uses unclamped k3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

K3_CLAMP = 10.0

KLEstimator = Callable[..., Tensor]


def _log_ratio(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    if log_probs.shape != ref_log_probs.shape:
        raise ValueError(
            f"log_probs {tuple(log_probs.shape)} and ref_log_probs {tuple(ref_log_probs.shape)} differ"
        )
    return log_probs.float() - ref_log_probs.float()


def _weighted(kl: Tensor, importance_ratio: Tensor | None) -> Tensor:
    return kl if importance_ratio is None else importance_ratio.float() * kl


def kl_k1(
    log_probs: Tensor, ref_log_probs: Tensor, importance_ratio: Tensor | None = None
) -> Tensor:
    """k1 = log p - log p_ref (times ``importance_ratio`` when given). No clamp."""
    return _weighted(_log_ratio(log_probs, ref_log_probs), importance_ratio)


def kl_k2(
    log_probs: Tensor, ref_log_probs: Tensor, importance_ratio: Tensor | None = None
) -> Tensor:
    """k2 = (log p - log p_ref)^2 / 2 (times ``importance_ratio`` when given). No clamp."""
    return _weighted(_log_ratio(log_probs, ref_log_probs) ** 2 / 2.0, importance_ratio)


def kl_k3(
    log_probs: Tensor,
    ref_log_probs: Tensor,
    importance_ratio: Tensor | None = None,
    *,
    clamp: float | None = K3_CLAMP,
    log_ratio_clamp: float | None = None,
) -> Tensor:
    """k3 / low_var_kl = exp(-k1) - 1 + k1, times ``importance_ratio``, clamped to [-10, 10].

    Non-negative, unbiased for KL(p || p_ref) under samples of p, lower variance than k1.
    Where the clamp is active the gradient is 0. ``clamp=None`` leaves the result unclamped
    (slime's ``k3``); ``log_ratio_clamp`` clamps ``k1`` to ``[-c, c]`` before ``exp`` (verl: 20).
    The config keys ``algorithm.k3_clamp`` / ``low_var_kl_clamp`` / ``kl_log_ratio_clamp`` choose
    these per name (the ``algorithm.numerics`` preset sets them).
    """
    k1 = _log_ratio(log_probs, ref_log_probs)
    if log_ratio_clamp is not None:
        k1 = k1.clamp(min=-log_ratio_clamp, max=log_ratio_clamp)
    kl = _weighted(torch.exp(-k1) - 1.0 + k1, importance_ratio)
    return kl if clamp is None else kl.clamp(min=-clamp, max=clamp)


KL_ESTIMATORS: dict[str, KLEstimator] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
    "low_var_kl": kl_k3,
}
"""Name -> estimator; ``low_var_kl`` is an alias of ``k3``."""


def compute_approx_kl(
    log_probs: Tensor,
    ref_log_probs: Tensor,
    kl_type: str = "k1",
    importance_ratio: Tensor | None = None,
) -> Tensor:
    """Dispatch on ``kl_type`` (``k1``, ``k2``, ``k3``, ``low_var_kl``); same shape as the inputs."""
    try:
        fn = KL_ESTIMATORS[kl_type]
    except KeyError:
        raise ValueError(
            f"unknown KL estimator {kl_type!r}; choose one of: {', '.join(KL_ESTIMATORS)}"
        ) from None
    return fn(log_probs, ref_log_probs, importance_ratio)


def compute_approx_kl_per_sample(
    log_probs: Sequence[Tensor],
    ref_log_probs: Sequence[Tensor],
    kl_type: str = "k1",
) -> list[Tensor]:
    """``compute_approx_kl`` on each sample: lists of ``[T_i]`` in, list of ``[T_i]`` out."""
    if len(log_probs) != len(ref_log_probs):
        raise ValueError(f"{len(log_probs)} log_probs for {len(ref_log_probs)} ref_log_probs")
    return [
        compute_approx_kl(lp, rp, kl_type) for lp, rp in zip(log_probs, ref_log_probs, strict=True)
    ]
