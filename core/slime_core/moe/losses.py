"""Router auxiliary losses of mixture-of-experts training (``train.moe_aux_loss_coef``,
``train.moe_z_loss_coef``), computed from every MoE layer's router logits of a forward.

* Load balancing (transformers' ``load_balancing_loss_func``, the model families' own
  definition): the layers' router logits of the real tokens (padding excluded) taken together,
  ``E * sum_{j,i} f_ji * P_i`` with ``f_ji`` the fraction of tokens whose top-k slot ``j`` is
  expert ``i`` and ``P_i`` the mean softmax probability of expert ``i``. Uniform routing
  gives ``top_k``. ``f`` counts the router's own top-k of its logits, also under routing
  replay, where the forward dispatches to the replayed experts instead: the loss balances
  what the router would choose (only ``P`` has a gradient, and it is the router's either
  way), as ``load_balancing_loss_func`` and megatron-core's router (its aux-loss routing map
  is recomputed from the logits) both do, so the two backends agree under replay too.
* Router z-loss (ST-MoE): the mean over real tokens and MoE layers of
  ``logsumexp(router_logits)^2``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from slime_core.moe.routing import find_routers


class RouterCapture:
    """Keeps every MoE router's logits ``[N, E]`` of the forwards inside :meth:`capturing`
    (forward hooks)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.routers = find_routers(model)
        if not self.routers:
            raise ValueError(f"router losses: {type(model).__name__} has no mixture-of-experts "
                             "router; set train.moe_aux_loss_coef = 0 and train.moe_z_loss_coef = 0")
        first: Any = self.routers[0]
        self.num_experts, self.top_k = int(first.num_experts), int(first.top_k)
        self._on = False
        self.taken: list[torch.Tensor] = []
        for router in self.routers:
            router.register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._on:
            self.taken.append(output[0])

    @contextmanager
    def capturing(self) -> Iterator[None]:
        self.taken = []
        self._on = True
        try:
            yield
        finally:
            self._on = False

    def losses(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(load balancing, z)`` losses of the captured forward; ``mask`` ``[N]`` (or
        ``[batch, seq]``, flattened row-major) is 1 at real tokens. Clears the capture."""
        taken, self.taken = self.taken, []
        return router_losses(taken, mask, self.top_k)


def router_losses(logits: list[torch.Tensor], mask: torch.Tensor,
                  top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Load-balancing and z losses (module docstring) of the layers' router ``logits``
    ``[N, E]`` with ``top_k`` experts a token, counting the tokens where ``mask`` is set."""
    keep = mask.reshape(-1).bool()
    lg = torch.cat([x[keep] for x in logits]).float()  # [layers x real tokens, E]
    n, num_experts = max(lg.shape[0], 1), lg.shape[-1]
    probs = torch.softmax(lg, dim=-1)
    with torch.no_grad():  # f: the fraction of tokens whose slot j is expert i
        own = probs.topk(top_k, dim=-1).indices
        f = torch.nn.functional.one_hot(own, num_experts).float().sum(0) / n  # [k, E]
    aux = num_experts * (f * (probs.sum(0) / n).unsqueeze(0)).sum()
    z = torch.logsumexp(lg, dim=-1).square().sum() / n
    return aux, z
