"""Token-level rewards for PPO: KL penalty in the reward plus the scalar outcome reward."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


@torch.no_grad()
def kl_in_reward(
    rewards: Tensor | Sequence[float],
    kl: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    kl_coef: float,
    mask_kl: bool = True,
    reward_on_last_token: bool = False,
) -> list[Tensor]:
    """Per-token rewards ``r_t = -kl_coef * kl_t * m_t``, plus ``rewards[i]`` on the last model token.

    ``kl``: per-token KL estimates vs the reference (e.g. k1 = log pi - log pi_ref), lists of
    ``[T_i]``; ``rewards``: ``[N]`` scalar outcome rewards; ``loss_masks``: lists of ``[T_i]``.

    Conventions: the KL penalty is applied on loss-masked (model) tokens only; the scalar reward
    goes on the **last loss-masked token** (the last response token in single-turn data). In a
    multi-turn response that ends with masked observation tokens this is the model's last token:
    ``gae_advantages_and_returns`` ignores rewards on masked positions, so the outcome reward
    must sit on a model token. A sample with no loss-masked token gets the scalar reward on its
    last token (its advantages are all 0 anyway). slime's built-in PPO adds the reward at index
    -1 and applies the KL on every token: ``mask_kl=False, reward_on_last_token=True``
    (``ppo.kl_in_reward_masked = false`` and ``algorithm.masked_steps = "count"``, the slime
    preset); OpenRLHF's ``compute_reward`` uses the last ``action_mask`` position like here.
    """
    r = torch.as_tensor(rewards).reshape(-1)
    if not (r.numel() == len(kl) == len(loss_masks)):
        raise ValueError(
            f"kl_in_reward: {r.numel()} rewards, {len(kl)} kl tensors, {len(loss_masks)} masks"
        )
    out = []
    for i, (k, m) in enumerate(zip(kl, loss_masks, strict=True)):
        mf = torch.as_tensor(m, device=k.device).to(torch.float32)
        if mf.shape != k.shape:
            raise ValueError(
                f"kl_in_reward: sample {i} kl {tuple(k.shape)} vs mask {tuple(mf.shape)}"
            )
        tok = -kl_coef * k.float() * (mf if mask_kl else torch.ones_like(mf))
        nz = torch.nonzero(mf, as_tuple=True)[0]
        if tok.numel():
            last = int(nz[-1].item()) if nz.numel() and not reward_on_last_token else tok.numel() - 1
            tok[last] = tok[last] + r[i].to(tok.device, tok.dtype)
        out.append(tok)
    return out
