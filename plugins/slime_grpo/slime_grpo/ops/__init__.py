"""Pure torch ops of the GRPO family on slime's per-sample layout (no framework imports).

A batch is given per sample: ``log_probs[i]``, ``loss_masks[i]`` ... are 1-D tensors over the
``T_i = response_lengths[i]`` response tokens; ``rewards`` is ``[N]``; the samples of one prompt
are consecutive (``group = i // n_samples_per_prompt``) unless ``group_ids`` are given.
Conventions are written in each function's docstring and in ``docs/algorithms.md``.

Registries (name -> function) for the registration hooks: ``ADVANTAGE_ESTIMATORS``,
``POLICY_LOSSES``, ``KL_ESTIMATORS``, ``IS_CORRECTIONS``, ``LOSS_AGG_MODES`` (via ``get_reducer``).
"""

from .advantages import (
    ADVANTAGE_ESTIMATORS,
    GRPO_STD_EPS,
    broadcast_to_tokens,
    discounted_returns,
    dr_grpo_advantages,
    group_normalized_rewards,
    grpo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    rloo_advantages,
)
from .aggregation import DEFAULT_LOSS_AGG_MODE, LOSS_AGG_MODES, Reducer, get_reducer
from .entropy_sft import entropy_bonus, entropy_from_logits, sft_loss
from .is_correction import IS_CORRECTIONS, icepop, seq_mask_tis, seq_tis, tis
from .kl import KL_ESTIMATORS, compute_approx_kl, compute_approx_kl_per_sample, kl_k1, kl_k2, kl_k3
from .opsm import opsm_mask
from .policy_loss import POLICY_LOSSES, cispo_loss, clipped_surrogate, gspo_loss, ppo_clip_loss
from .whiten import WHITEN_EPS, whiten

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "DEFAULT_LOSS_AGG_MODE",
    "GRPO_STD_EPS",
    "IS_CORRECTIONS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "WHITEN_EPS",
    "Reducer",
    "broadcast_to_tokens",
    "cispo_loss",
    "clipped_surrogate",
    "compute_approx_kl",
    "compute_approx_kl_per_sample",
    "discounted_returns",
    "dr_grpo_advantages",
    "entropy_bonus",
    "entropy_from_logits",
    "get_reducer",
    "group_normalized_rewards",
    "grpo_advantages",
    "gspo_loss",
    "icepop",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "opsm_mask",
    "ppo_clip_loss",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "rloo_advantages",
    "seq_mask_tis",
    "seq_tis",
    "sft_loss",
    "tis",
    "whiten",
]
