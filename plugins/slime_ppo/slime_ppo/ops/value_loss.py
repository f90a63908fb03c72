"""Clipped value (critic) loss."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

# one implementation of the loss reducers serves every algorithm: the critic uses the
# ``algorithm.loss_reducer`` record, the actor's (slime_ppo.critic)
Reducer = Callable[[Sequence[Tensor] | Tensor], Tensor]

VALUE_CLIP = 0.2
VALUE_LOSS_COEF = 0.5
CLIPFRAC_RULES = ("delta", "loss")


def value_loss(
    values: Sequence[Tensor],
    old_values: Sequence[Tensor],
    returns: Sequence[Tensor],
    loss_masks: Sequence[Tensor],
    *,
    value_clip: float | None = VALUE_CLIP,
    coef: float = VALUE_LOSS_COEF,
    reducer: Reducer,
    clipfrac_rule: str = "delta",
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped value loss, reduced to a scalar.

    Per token (``v`` = current prediction with grad, ``v_old`` = prediction at rollout time,
    ``R`` = return target)::

        v_clip = v_old + clamp(v - v_old, -value_clip, value_clip)
        L_t    = coef * max((v - R)^2, (v_clip - R)^2)          # coef = 0.5 by default

    ``value_clip=None`` disables clipping: ``L_t = coef * (v - R)^2``. The 0.5 factor follows verl
    and OpenRLHF; slime's ``value_loss_function`` has no 0.5 (pass ``coef=1.0`` to match it).
    ``reducer`` aggregates ``L``: a loss reducer built from ``loss_masks`` (the
    ``algorithm.loss_reducer`` record's ``factory(config, response_lengths, loss_masks)``); it
    takes the packed ``[sum T_i]`` tensor.

    Returns ``(loss, metrics)``: a 0-dim loss with grad through ``values``, and detached
    ``value_loss`` and ``value_clipfrac``, as each system computes it (``ppo.value_clipfrac``):

    * ``clipfrac_rule="delta"`` (slime's ``value_loss_function``): the fraction of tokens with
      ``|v - v_old| > value_clip``, reduced by ``reducer`` like the loss;
    * ``"loss"`` (verl's ``core_algos.compute_value_loss``): the fraction of tokens with
      ``(v_clip - R)^2 > (v - R)^2`` (the clipped error strictly the larger one) as a plain
      masked token mean, ``sum(ind * mask) / (sum(mask) + 1e-8)`` (verl's ``masked_mean``),
      whatever the loss aggregation: verl passes ``loss_agg_mode`` to the loss only.

    Shapes: lists of ``[T_i]``.
    """
    if clipfrac_rule not in CLIPFRAC_RULES:
        raise ValueError(f"value_loss: clipfrac_rule must be one of {CLIPFRAC_RULES}, "
                         f"got {clipfrac_rule!r}")
    lengths = [int(v.numel()) for v in values]
    for name, xs in (("old_values", old_values), ("returns", returns), ("loss_masks", loss_masks)):
        if [int(x.numel()) for x in xs] != lengths:
            raise ValueError(
                f"value_loss: {name} lengths {[int(x.numel()) for x in xs]} != values lengths {lengths}"
            )
    v = torch.cat(list(values)) if lengths else torch.zeros(0)
    v_old = (torch.cat(list(old_values)) if lengths else torch.zeros(0)).detach().to(v.dtype)
    ret = (torch.cat(list(returns)) if lengths else torch.zeros(0)).detach().to(v.dtype)
    unclipped = (v - ret) ** 2
    if value_clip is None:
        per_token = unclipped
        clipped_ind = torch.zeros_like(v)
    else:
        v_clip = v_old + (v - v_old).clamp(-value_clip, value_clip)
        clipped = (v_clip - ret) ** 2
        per_token = torch.maximum(unclipped, clipped)
        if clipfrac_rule == "delta":
            clipped_ind = ((v - v_old).abs() > value_clip).to(v.dtype).detach()
        else:
            clipped_ind = (clipped > unclipped).to(v.dtype).detach()
    loss = coef * reducer(per_token)
    if clipfrac_rule == "loss":
        mask = (torch.cat(list(loss_masks)) if lengths else torch.zeros(0)).to(v.device)
        clipfrac = torch.where(mask.bool(), clipped_ind, 0.0).sum() / (mask.sum() + 1e-8)
    else:
        clipfrac = reducer(clipped_ind)
    metrics = {
        "value_loss": loss.detach(),
        "value_clipfrac": clipfrac.detach(),
    }
    return loss, metrics
