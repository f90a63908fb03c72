"""Advantage estimators of the GRPO family, on slime's per-sample layout.

Inputs: ``rewards`` ``[N]`` (one scalar per sample), groups given by ``n_samples_per_prompt``
(sample ``i`` is in group ``i // n``) or by explicit ``group_ids``. Outputs: a list of ``N``
per-token advantage tensors ``[T_i]``. Every estimator runs under ``torch.no_grad()``: an
advantage is a constant for the policy loss.

Conventions (chosen once, tested against hand-derived values):

* group mean: arithmetic mean of the group's rewards;
* group std: torch's default ``std`` (unbiased, divides by n - 1), epsilon 1e-6 added to the std
  (not the variance): ``A = (r - mean) / (std + 1e-6)``;
* a singleton group (n = 1) is never divided by its std (it is undefined); its baseline is its own
  reward, so its advantage is exactly 0 for grpo / dr_grpo / rloo / reinforce_plus_plus_baseline.
  ``singleton="reward"`` gives verl's rule instead: mean 0 and std 1, i.e. ``A = r / (1 + eps)``
  for grpo, ``A = r`` for dr_grpo / rloo / the REINFORCE++ baseline (TRL gives std 0 then
  divides, i.e. A = 0);
* sequence-level estimators broadcast the scalar to every token of the response, masked tokens
  included (the loss masks them out later), as slime does;
* REINFORCE++ returns run over loss-masked tokens only (see ``discounted_returns``;
  ``skip_masked=False`` makes every position a discount step, as slime) and are then whitened
  over all loss-masked tokens of the batch (epsilon 1e-8 on the variance); masked tokens get
  advantage 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._batch import as_float_rewards, float_masks, group_index, group_mean_std, last_masked_index
from .whiten import WHITEN_EPS, AllSum, whiten

GRPO_STD_EPS = 1e-6

GroupIds = Sequence[int] | Tensor | None
SINGLETON_RULES = ("zero", "reward")


def _check_singleton(singleton: str) -> None:
    if singleton not in SINGLETON_RULES:
        raise ValueError(f"singleton must be one of {', '.join(SINGLETON_RULES)}, got {singleton!r}")


def broadcast_to_tokens(scalars: Tensor, response_lengths: Sequence[int]) -> list[Tensor]:
    """``[N]`` per-sample scalars -> list of ``[T_i]`` tensors filled with ``scalars[i]``."""
    if scalars.numel() != len(response_lengths):
        raise ValueError(f"{scalars.numel()} scalars for {len(response_lengths)} response lengths")
    lengths = [int(n) for n in response_lengths]
    # one repeat and one split, not three operators a sample (each its own storage region)
    counts = torch.tensor(lengths, dtype=torch.long, device=scalars.device)
    packed = scalars.reshape(-1).repeat_interleave(counts, output_size=sum(lengths))
    return list(packed.split(lengths))


@torch.no_grad()
def group_normalized_rewards(
    rewards: Tensor | Sequence[float],
    *,
    n_samples_per_prompt: int | None = None,
    group_ids: GroupIds = None,
    normalize_std: bool = True,
    eps: float = GRPO_STD_EPS,
    singleton: str = "zero",
) -> Tensor:
    """GRPO's scalar advantage per sample, ``[N]``.

    ``A_i = (r_i - mean_g) / (std_g + eps)`` with ``std_g`` torch's unbiased std over group g and
    ``eps = 1e-6``; with ``normalize_std=False`` (Dr. GRPO) ``A_i = r_i - mean_g``. A singleton
    group skips the std division and gets ``A_i = r_i - r_i = 0`` (``singleton="zero"``, slime)
    or mean 0 and std 1, ``A_i = r_i / (1 + eps)`` (``singleton="reward"``, verl).
    """
    _check_singleton(singleton)
    r = as_float_rewards(rewards)
    idx = group_index(r.numel(), n_samples_per_prompt, group_ids, device=r.device)
    if r.numel() == 0:
        return r.clone()
    mean, std, count = group_mean_std(r, idx)
    alone = count <= 1
    if singleton == "reward":
        mean = torch.where(alone, torch.zeros_like(mean), mean)
    centered = r - mean
    if not normalize_std:
        return centered
    lone_denom = 1.0 + eps if singleton == "reward" else 1.0
    denom = torch.where(alone, torch.full_like(std, lone_denom), std + eps)
    return centered / denom


@torch.no_grad()
def grpo_advantages(
    rewards: Tensor | Sequence[float],
    response_lengths: Sequence[int],
    *,
    n_samples_per_prompt: int | None = None,
    group_ids: GroupIds = None,
    normalize_std: bool = True,
    eps: float = GRPO_STD_EPS,
    singleton: str = "zero",
) -> list[Tensor]:
    """GRPO: ``A_i,t = (r_i - mean_g) / (std_g + 1e-6)`` broadcast over the ``T_i`` tokens.

    ``std_g``: unbiased (``torch.std``); singleton group: no division, ``A = 0`` (``singleton``:
    see ``group_normalized_rewards``).
    ``normalize_std=False`` gives the Dr. GRPO advantage. GSPO and CISPO use these advantages
    (they differ in the loss). Returns a list of ``[T_i]`` tensors.
    """
    scalars = group_normalized_rewards(
        rewards,
        n_samples_per_prompt=n_samples_per_prompt,
        group_ids=group_ids,
        normalize_std=normalize_std,
        eps=eps,
        singleton=singleton,
    )
    return broadcast_to_tokens(scalars, response_lengths)


@torch.no_grad()
def dr_grpo_advantages(
    rewards: Tensor | Sequence[float],
    response_lengths: Sequence[int],
    *,
    n_samples_per_prompt: int | None = None,
    group_ids: GroupIds = None,
    singleton: str = "zero",
) -> list[Tensor]:
    """Dr. GRPO: ``A_i,t = r_i - mean_g`` (mean baseline, no std division), broadcast over tokens."""
    return grpo_advantages(
        rewards,
        response_lengths,
        n_samples_per_prompt=n_samples_per_prompt,
        group_ids=group_ids,
        normalize_std=False,
        singleton=singleton,
    )


@torch.no_grad()
def rloo_advantages(
    rewards: Tensor | Sequence[float],
    response_lengths: Sequence[int],
    *,
    n_samples_per_prompt: int | None = None,
    group_ids: GroupIds = None,
    singleton: str = "zero",
) -> list[Tensor]:
    """RLOO: ``A_i = r_i - (1/(n-1)) sum_{j != i} r_j = n/(n-1) * (r_i - mean_g)``, broadcast.

    A singleton group has no other sample: ``A = 0`` (``singleton="reward"``: ``A = r``, verl).
    No std division.
    """
    _check_singleton(singleton)
    r = as_float_rewards(rewards)
    idx = group_index(r.numel(), n_samples_per_prompt, group_ids, device=r.device)
    if r.numel() == 0:
        return []
    mean, _, count = group_mean_std(r, idx)
    scale = torch.where(count > 1, count / (count - 1).clamp_min(1), torch.zeros_like(count))
    adv = scale * (r - mean)
    if singleton == "reward":
        adv = torch.where(count > 1, adv, r)
    return broadcast_to_tokens(adv, response_lengths)


def _token_rewards(
    rewards: Tensor, loss_masks: list[Tensor], kl: Sequence[Tensor] | None, kl_coef: float
) -> list[Tensor]:
    out = []
    for i, m in enumerate(loss_masks):
        tok = torch.zeros_like(m)
        if kl is not None and kl_coef != 0.0:
            tok = -kl_coef * kl[i].to(m.dtype) * m
        last = last_masked_index(m)
        if last is not None:
            tok[last] = tok[last] + rewards[i].to(m.dtype)
        out.append(tok)
    return out


def _scan(padded: Tensor, gamma: float) -> Tensor:
    """Backward discounted sums along dim 1 (trailing zero padding changes nothing)."""
    if gamma == 1.0:
        return padded.flip(1).cumsum(1).flip(1)
    scanned = torch.zeros_like(padded)
    running = torch.zeros(padded.size(0), dtype=padded.dtype, device=padded.device)
    for t in range(padded.size(1) - 1, -1, -1):
        running = padded[:, t] + gamma * running
        scanned[:, t] = running
    return scanned


@torch.no_grad()
def discounted_returns(
    token_rewards: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    gamma: float,
    *,
    skip_masked: bool = True,
) -> list[Tensor]:
    """``G_t = sum_{k >= t, k masked-in} gamma^(j(k) - j(t)) r_k`` over loss-masked tokens only.

    ``j(t)`` counts loss-masked positions: masked-out (observation) tokens are skipped, they do
    not break the chain and are not a discount step; their return is 0. With ``gamma = 1`` and a
    single-turn mask this equals slime's ``get_reinforce_plus_plus_returns``.
    ``skip_masked=False`` (slime): ``G_t = r_t + gamma G_{t+1}`` over every position, so a masked
    position is a discount step and carries the return.
    """
    if not skip_masked:
        if not token_rewards:
            return []
        full = torch.nn.utils.rnn.pad_sequence(list(token_rewards), batch_first=True)
        scanned_all = _scan(full, gamma)
        return [scanned_all[i, : r.numel()].clone() for i, r in enumerate(token_rewards)]
    keeps = [m != 0 for m in loss_masks]
    kept = [r[k] for r, k in zip(token_rewards, keeps, strict=True)]
    if not kept:
        return []
    # Compress each sample to its loss-masked tokens, pad at the end (zeros do not change the
    # returns of earlier positions) and scan backwards over the batch at once.
    scanned = _scan(torch.nn.utils.rnn.pad_sequence(kept, batch_first=True), gamma)
    out = []
    for i, (r, k) in enumerate(zip(token_rewards, keeps, strict=True)):
        g = torch.zeros_like(r)
        g[k] = scanned[i, : int(k.sum().item())]
        out.append(g)
    return out


@torch.no_grad()
def reinforce_plus_plus_advantages(
    rewards: Tensor | Sequence[float],
    loss_masks: Sequence[Tensor],
    *,
    kl: Sequence[Tensor] | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    whiten_advantages: bool = True,
    eps: float = WHITEN_EPS,
    all_sum: AllSum | None = None,
    skip_masked: bool = True,
) -> list[Tensor]:
    """REINFORCE++ (https://arxiv.org/abs/2501.03262).

    Per-token reward ``r_t = -kl_coef * kl_t * m_t``, plus the scalar reward ``r_i`` on the last
    loss-masked token (a fully masked sample gets no reward and advantage 0). Returns ``G_t`` from
    ``discounted_returns`` (loss-masked tokens only, gamma per loss-masked step). Then, if
    ``whiten_advantages``, ``whiten(G, mask)`` over all loss-masked tokens of the batch
    (unbiased variance, ``eps = 1e-8`` on the variance); masked tokens are set to 0 afterwards.

    Shapes: ``rewards [N]``, ``loss_masks`` / ``kl``: lists of ``[T_i]``. Returns ``[T_i]`` list.
    """
    r = as_float_rewards(rewards)
    masks = float_masks(loss_masks, like=r)
    if r.numel() != len(masks):
        raise ValueError(f"{r.numel()} rewards for {len(masks)} loss masks")
    returns = discounted_returns(_token_rewards(r, masks, kl, kl_coef), masks, gamma,
                                 skip_masked=skip_masked)
    if whiten_advantages and (returns or all_sum is not None):  # every rank joins the sums
        returns = whiten(returns, masks, shift_mean=True, eps=eps,  # type: ignore[assignment]
                         all_sum=all_sum)
    return [
        torch.where(m != 0, g, torch.zeros_like(g)) for g, m in zip(returns, masks, strict=True)
    ]


@torch.no_grad()
def reinforce_plus_plus_baseline_advantages(
    rewards: Tensor | Sequence[float],
    loss_masks: Sequence[Tensor],
    *,
    n_samples_per_prompt: int | None = None,
    group_ids: GroupIds = None,
    kl: Sequence[Tensor] | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    whiten_advantages: bool = True,
    cumulative_kl: bool = True,
    eps: float = WHITEN_EPS,
    all_sum: AllSum | None = None,
    skip_masked: bool = True,
    singleton: str = "zero",
) -> list[Tensor]:
    """REINFORCE++-baseline: group-mean baseline, KL in the reward, then batch whitening.

    1. ``b_i = r_i - mean_g`` (no std division; singleton group: ``b_i = 0``);
    2. ``cumulative_kl=True`` (default; OpenRLHF's ``reinforce_baseline`` and the paper):
       ``reinforce_plus_plus_advantages(b, ...)``, i.e. the KL penalty enters the token rewards and
       is summed into the return. ``cumulative_kl=False`` (slime's built-in form): ``A_t = b_i -
       kl_coef * kl_t`` on every token, no return. Both coincide when ``kl_coef == 0``;
    3. whitening over loss-masked tokens (``eps = 1e-8``); masked tokens get 0.
    """
    b = group_normalized_rewards(
        rewards, n_samples_per_prompt=n_samples_per_prompt, group_ids=group_ids,
        normalize_std=False, singleton=singleton,
    )
    if cumulative_kl:
        return reinforce_plus_plus_advantages(
            b,
            loss_masks,
            kl=kl,
            kl_coef=kl_coef,
            gamma=gamma,
            whiten_advantages=whiten_advantages,
            eps=eps,
            all_sum=all_sum,
            skip_masked=skip_masked,
        )
    masks = float_masks(loss_masks, like=b)
    adv = [b[i] * torch.ones_like(m) for i, m in enumerate(masks)]
    if kl is not None and kl_coef != 0.0:
        adv = [a - kl_coef * k.to(a.dtype) for a, k in zip(adv, kl, strict=True)]
    if whiten_advantages and (adv or all_sum is not None):
        adv = whiten(adv, masks, shift_mean=True, eps=eps,  # type: ignore[assignment]
                     all_sum=all_sum)
    return [torch.where(m != 0, a, torch.zeros_like(a)) for a, m in zip(adv, masks, strict=True)]


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., list[Tensor]]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "gspo": grpo_advantages,
    "cispo": grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_plus_plus": reinforce_plus_plus_advantages,
    "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline_advantages,
}
"""Name -> estimator. ``gspo`` and ``cispo`` share GRPO's advantages (as in slime)."""
