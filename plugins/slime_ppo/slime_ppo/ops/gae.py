"""Generalized Advantage Estimation over per-sample token rewards, skipping masked tokens."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


@torch.no_grad()
def gae_advantages_and_returns(
    token_rewards: Sequence[Tensor],
    values: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    skip_masked: bool = True,
) -> tuple[list[Tensor], list[Tensor]]:
    """GAE (Schulman et al. 2016) run over the loss-masked positions of each response only.

    Let ``t_1 < ... < t_k`` be the positions with ``m_t != 0`` (model tokens). For j = k..1::

        delta_j = r_{t_j} + gamma * V_{t_{j+1}} - V_{t_j}       (V_{t_{k+1}} = 0: the episode ends)
        A_{t_j} = delta_j + gamma * lam * A_{t_{j+1}}           (A_{t_{k+1}} = 0)

    Masked (observation / tool) positions get ``A_t = 0``; they do not break the chain and are
    not a discount step, and their rewards and values are ignored (put rewards on model tokens,
    e.g. with ``kl_in_reward``). ``returns = advantages + values`` on every position (so a
    masked position's return is its value; the value loss masks it out).

    Shapes: lists of ``[T_i]`` (``token_rewards``, ``values``, ``loss_masks``). No gradient.
    ``gamma = lam = 1`` (slime's defaults) gives ``A_t = sum_{k >= t} r_k - V_t`` over model tokens.

    ``skip_masked=False`` (slime's ``vanilla_gae`` / ``chunked_gae``): the recursion runs over
    every position, ``delta_t = r_t + gamma V_{t+1} - V_t``, masked ones included (their rewards
    and values count, and they are discount steps); ``algorithm.masked_steps = "count"``.

    Peers: verl's GAE skips observation tokens the same way but leaves the carried advantage on
    them (not 0); slime's built-in GAE and OpenRLHF's run over every position (OpenRLHF zeroes
    masked rewards and values first).
    """
    if not (len(token_rewards) == len(values) == len(loss_masks)):
        raise ValueError(
            "gae: token_rewards, values and loss_masks have different numbers of samples"
        )
    keeps, kept_r, kept_v = [], [], []
    for i, (r, v, m) in enumerate(zip(token_rewards, values, loss_masks, strict=True)):
        if not (r.shape == v.shape == torch.as_tensor(m).shape) or r.dim() != 1:
            raise ValueError(
                f"gae: sample {i} has shapes {tuple(r.shape)}, {tuple(v.shape)}, {tuple(m.shape)}"
            )
        keep = torch.as_tensor(m, device=r.device) != 0
        if not skip_masked:
            keep = torch.ones_like(keep)
        keeps.append(keep)
        kept_r.append(r[keep].float())
        kept_v.append(v[keep].float())
    if not keeps:
        return [], []
    # Compress each sample to its model tokens, pad at the end with zeros (a zero reward and a zero
    # value after the last token are exactly the "episode ended" boundary) and scan backwards.
    rew = torch.nn.utils.rnn.pad_sequence(kept_r, batch_first=True)
    val = torch.nn.utils.rnn.pad_sequence(kept_v, batch_first=True)
    steps = rew.size(1)
    next_val = torch.cat([val[:, 1:], val.new_zeros(val.size(0), 1)], dim=1)
    deltas = rew + gamma * next_val - val
    adv = torch.zeros_like(deltas)
    running = deltas.new_zeros(deltas.size(0))
    for t in range(steps - 1, -1, -1):
        running = deltas[:, t] + gamma * lam * running
        adv[:, t] = running
    advantages, returns = [], []
    for i, (keep, v) in enumerate(zip(keeps, values, strict=True)):
        a = torch.zeros_like(v)
        a[keep] = adv[i, : int(keep.sum().item())].to(v.dtype)
        advantages.append(a)
        returns.append(a + v)
    return advantages, returns
