"""Router auxiliary losses of mixture-of-experts training (``train.moe_aux_loss_coef``,
``train.moe_z_loss_coef``), computed from every MoE layer's router logits of a forward.

* Load balancing (transformers' ``load_balancing_loss_func``, the model families' own
  definition): the layers' router logits of the real tokens (padding excluded) taken together,
  ``E * sum_{j,i} f_ji * P_i`` with ``f_ji`` the fraction of tokens whose top-k slot ``j`` is
  expert ``i`` and ``P_i`` the mean softmax probability of expert ``i``. Uniform routing
  gives ``top_k``. ``f`` counts the experts the forward used: with routing replay the
  replayed ids, the load the experts really carried (``f`` has no gradient, so only ``P``,
  the router's own probabilities, trains); without replay they are the router's own top-k,
  which is what ``load_balancing_loss_func`` recomputes from the logits.
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
    """Keeps every MoE router's ``(logits [N, E], expert ids [N, k])`` of the forwards inside
    :meth:`capturing` (forward hooks, registered after a
    :class:`~slime_core.moe.routing.RoutingControl`'s, so they see the replayed ids)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.routers = find_routers(model)
        if not self.routers:
            raise ValueError(f"router losses: {type(model).__name__} has no mixture-of-experts "
                             "router; set train.moe_aux_loss_coef = 0 and train.moe_z_loss_coef = 0")
        self.num_experts = int(self.routers[0].num_experts)  # type: ignore[arg-type]
        self._on = False
        self.taken: list[tuple[torch.Tensor, torch.Tensor]] = []
        for router in self.routers:
            router.register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._on:
            self.taken.append((output[0], output[2]))

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
        return router_losses([t[0] for t in taken], [t[1] for t in taken], mask,
                             self.num_experts)


def router_losses(logits: list[torch.Tensor], ids: list[torch.Tensor], mask: torch.Tensor,
                  num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Load-balancing and z losses (module docstring) of the layers' router ``logits``
    ``[N, E]`` and used expert ``ids`` ``[N, k]``, counting the tokens where ``mask`` is set."""
    keep = mask.reshape(-1).bool()
    lg = torch.cat([x[keep] for x in logits]).float()  # [layers x real tokens, E]
    used = torch.cat([i[keep] for i in ids]).long()  # [layers x real tokens, k]
    n = max(lg.shape[0], 1)
    probs = torch.softmax(lg, dim=-1)
    with torch.no_grad():  # f: the fraction of tokens whose slot j went to expert i
        f = torch.nn.functional.one_hot(used, num_experts).float().sum(0) / n  # [k, E]
    aux = num_experts * (f * (probs.sum(0) / n).unsqueeze(0)).sum()
    z = torch.logsumexp(lg, dim=-1).square().sum() / n
    return aux, z
