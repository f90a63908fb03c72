"""``train.moe_aux_loss_coef`` / ``moe_z_loss_coef`` on megatron-core's router.

megatron-core computes both in every MoE layer's router (training forwards with autograd)
and adds their gradients through ``MoEAuxLossAutoScaler``; the backend maps the keys onto
``moe_router_load_balancing_type = "aux_loss"``, ``moe_aux_loss_coeff`` and
``moe_z_loss_coeff`` so that a coefficient means what it means on the ``torch`` backend
(``slime_core.moe.losses``):

* megatron's per-layer "aux_loss" is ``E / k * sum_i f_i P_i`` (``f_i`` the fraction of
  tokens routed to expert ``i``, summing to ``k``), i.e. transformers' form divided by
  ``top_k``, and every layer adds its own: the coefficient given to megatron is
  ``coef * top_k / layers``, so the gradient is ``coef x`` the mean over layers of the
  per-layer transformers form. transformers (the ``torch`` backend) pools the layers' tokens
  before the product instead (``E * sum_i mean_l f_li * mean_l P_li``): the two are equal
  with one MoE layer and differ slightly with several (docs/moe.md);
* megatron's z-loss is each layer's mean over tokens of ``logsumexp^2``, added per layer:
  given ``coef / layers``, it is the ``torch`` backend's mean over layers and tokens exactly.

With tensor parallelism (no sequence parallelism here: each TP rank routes every token, the
backend's ``MoELayerWithoutSequenceParallel``) megatron still counts tokens as if the TP ranks
held different ones (its load counts and token totals are summed over the TP group, its z
coefficient divided by the TP size), which halves both at TP = 2: the coefficients and the
logged load value are multiplied by the TP size back (:func:`replicas`).

Padding is excluded (megatron's ``padding_mask``, True at padding). Each micro-batch's
router-loss gradient takes that micro-batch's share of the policy loss
(``MoEAuxLossAutoScaler.set_loss_scale``), as on the ``torch`` backend. The values are read
from megatron's per-layer tracker after each forward: ``train/moe_aux_loss`` (the mean over
layers of the transformers per-layer form) and ``train/moe_z_loss``.
"""

from __future__ import annotations

from typing import Any

import torch


def enabled(train: Any) -> bool:
    return bool(train.moe_aux_loss_coef or train.moe_z_loss_coef)


def replicas(mg: Any) -> int:
    """How many ranks of megatron's TP group route the same tokens (the TP size without
    sequence parallelism, else 1)."""
    tp = int(mg.tensor_model_parallel_size)
    return tp if tp > 1 and not mg.sequence_parallel else 1


def config_kwargs(layout: Any, train: Any, mg: Any) -> dict[str, Any]:
    """megatron-core ``TransformerConfig`` keys for ``train``'s router losses (every layer of
    a megatron MoE layout is an MoE layer)."""
    if not enabled(train):
        return {"moe_router_load_balancing_type": "none", "moe_aux_loss_coeff": 0.0}
    scale = replicas(mg) / layout.num_layers
    return {"moe_router_load_balancing_type": "aux_loss",
            "moe_aux_loss_coeff": float(train.moe_aux_loss_coef) * layout.top_k * scale,
            "moe_z_loss_coeff": float(train.moe_z_loss_coef) * scale or None}


def reset() -> None:
    """Empty megatron's process-wide loss tracker (its per-layer tensors are sized by the
    first model that logged: a later model of more layers would index past them)."""
    from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker

    get_moe_layer_wise_logging_tracker().clear()


def padding_mask(tokens: list[torch.Tensor], width: int, device: torch.device) -> torch.Tensor:
    """``[rows, width]`` True at the right padding of the rows ``tokens``."""
    lengths = torch.tensor([int(len(t)) for t in tokens])
    return (torch.arange(width).unsqueeze(0) >= lengths.unsqueeze(1)).to(device)


def set_share(share: float, device: torch.device) -> None:
    """The weight of the next backward's router-loss gradients (the micro-batch's share)."""
    from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

    MoEAuxLossAutoScaler.set_loss_scale(torch.tensor(float(share), device=device))


def take_metrics(layout: Any, mg: Any) -> dict[str, float]:
    """The router losses of the forward just run (megatron's tracker, cleared here)."""
    from megatron.core.transformer.moe.moe_utils import (
        clear_aux_losses_tracker,
        get_moe_layer_wise_logging_tracker,
    )

    tracker = get_moe_layer_wise_logging_tracker()
    out: dict[str, float] = {}
    if "load_balancing_loss" in tracker:
        values = tracker["load_balancing_loss"]["values"]
        out["train/moe_aux_loss"] = (float(values.sum()) * layout.top_k * replicas(mg)
                                     / layout.num_layers)
    if "z_loss" in tracker:
        out["train/moe_z_loss"] = float(tracker["z_loss"]["values"].sum()) / layout.num_layers
    clear_aux_losses_tracker()
    return out
