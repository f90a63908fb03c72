"""Rollout routing replay (R3) on megatron-core's MoE router.

megatron-core's ``TopKRouter`` picks experts in ``moe_utils.topk_routing_with_score_function``,
which asks the router's ``router_replay`` attribute (megatron's own ``RouterReplay`` when
``moe_enable_routing_replay`` is set, else ``None``) for the top-k:
``router_replay.get_replay_topk(scores, topk, num_groups, group_topk, default_compute_topk)``
returns ``(values, ids)``. :class:`MegatronRouting` puts its own object there on every router
of the policy (megatron's global ``RouterReplay`` list and its one-shot backward queue are not
used), which

* outside :meth:`MegatronRouting.replaying` returns the router's own top-k, unchanged;
* inside it returns the replayed ids, with the values ``scores.gather(1, ids)``: megatron then
  turns them into gate weights by its own rule, which the backend configures to Qwen3-MoE's
  (``megatron_backend.model``): with ``norm_topk_prob`` the scores are the logits and the gates
  ``softmax`` over the k gathered logits (= softmax over all experts gathered at the ids and
  renormalised); without it the scores are the softmax over all experts and the gates are the
  gathered probabilities. That is the Hugging Face replay's rule
  (``slime_core.moe.routing.replay_gates``); gradients reach the router weight through the
  gathered scores. A row of ``-1`` keeps the router's own choice (a sample's last position and
  padding: they predict nothing), as the Hugging Face replay does.

Token order: megatron's MoE layer routes ``[s, b, h]`` hidden states flattened
sequence-major (token ``(p, row)`` is ``p * b + row``); :func:`replay_ids` lays the batch's
records out that way. With pipeline parallelism a stage's routers are its layers'
(``first_layer`` onward). With recomputation (``megatron.recompute = "full"``) the router runs
again in the backward pass: the replay stays active across the micro-batch's forward and
backward (the trainer's context spans both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist


def replay_ids(routes: list[torch.Tensor | None], lengths: list[int], width: int,
               layers: int, top_k: int, device: torch.device) -> torch.Tensor:
    """The replayed ids of a right-padded ``[b, width]`` batch as megatron's router sees its
    tokens, ``[width * b, layers, top_k]`` (sequence-major), ``-1`` where the router keeps its
    own choice (sample ``i``'s last position, padding, a sample without a record)."""
    out = torch.full((len(lengths), width, layers, top_k), -1, dtype=torch.long)
    for row, (r, n) in enumerate(zip(routes, lengths, strict=True)):
        if r is not None:
            out[row, : n - 1] = r.long()
    return out.transpose(0, 1).reshape(-1, layers, top_k).to(device)


def routers_of(model: Any) -> list[Any]:
    """The ``TopKRouter`` modules of a GPTModel (one per MoE layer of this stage), in order."""
    from megatron.core.transformer.moe.router import TopKRouter

    return [m for m in model.modules() if isinstance(m, TopKRouter)]


class _LayerReplay:
    """What megatron's ``topk_routing_with_score_function`` calls for one layer's top-k (the
    interface of megatron's ``RouterReplay.get_replay_topk``)."""

    def __init__(self, control: MegatronRouting, layer: int) -> None:
        self.control, self.layer = control, layer

    def get_replay_topk(self, scores: torch.Tensor, topk: int, num_groups: int | None = None,
                        group_topk: int | None = None,
                        default_compute_topk: Callable[..., tuple[torch.Tensor, torch.Tensor]]
                        | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        assert default_compute_topk is not None
        values, own = default_compute_topk(scores, topk, num_groups=num_groups,
                                           group_topk=group_topk)
        return self.control.choose(self.layer, scores, values, own)


class MegatronRouting:
    """Record or replay the expert choice of every MoE layer of ``model`` (one pipeline stage:
    its routers are global layers ``first_layer`` onward); see the module docstring."""

    def __init__(self, model: Any, layers: int, top_k: int, first_layer: int = 0) -> None:
        self.routers = routers_of(model)
        if not self.routers:
            raise ValueError("routing replay: the megatron model has no MoE router")
        missing = [i for i, r in enumerate(self.routers) if not hasattr(r, "router_replay")]
        if missing:
            import megatron.core

            raise RuntimeError(
                "routing replay: megatron-core "
                f"{getattr(megatron.core, '__version__', '?')}'s TopKRouter has no "
                "router_replay hook (megatron-core >= 0.16 has it); set train.routing_replay "
                "= 'off'")
        self.layers, self.top_k, self.first_layer = layers, top_k, first_layer
        self._replay: torch.Tensor | None = None  # [N, layers, top_k]
        self._recording = False
        self._recorded: list[list[torch.Tensor]] = [[] for _ in self.routers]
        self._agree: list[torch.Tensor] = []
        for i, router in enumerate(self.routers):
            router.router_replay = _LayerReplay(self, i)

    def choose(self, local: int, scores: torch.Tensor, values: torch.Tensor,
               own: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local MoE layer ``local``'s top-k (values, ids): its own, or the replayed ones."""
        chosen = own
        if self._replay is not None:
            want = self._replay[:, self.first_layer + local]
            if want.shape != own.shape:
                raise ValueError(f"routing replay: MoE layer {self.first_layer + local} routes "
                                 f"{tuple(own.shape)} (tokens, top_k) but the replay holds "
                                 f"{tuple(want.shape)}")
            known = (want >= 0).all(dim=-1, keepdim=True)
            chosen = torch.where(known, want.to(own.dtype), own)
            with torch.no_grad():
                same = (chosen.unsqueeze(-1) == own.unsqueeze(-2)).any(-1) & known
                self._agree.append(torch.stack([same.sum(), known.sum() * own.shape[-1]]))
            values = scores.gather(1, chosen)
        if self._recording:
            self._recorded[local].append(chosen.detach())
        return values, chosen

    @contextmanager
    def replaying(self, ids: torch.Tensor) -> Iterator[None]:
        """Route the forwards (and recomputations) inside the block to ``ids`` ``[N, layers,
        top_k]`` (:func:`replay_ids`; ``layers`` counts every MoE layer of the model)."""
        if ids.dim() != 3 or tuple(ids.shape[1:]) != (self.layers, self.top_k):
            raise ValueError(f"routing replay: ids of shape {tuple(ids.shape)}, expected "
                             f"(tokens, {self.layers}, {self.top_k})")
        self._replay = ids
        try:
            yield
        finally:
            self._replay = None

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Keep the ids every router of this stage uses inside the block (:meth:`take`)."""
        self._recording = True
        try:
            yield
        finally:
            self._recording = False

    def take(self) -> torch.Tensor:
        """The ids of the one forward recorded since the last call, ``[N, stage layers,
        top_k]`` (N sequence-major, as :func:`replay_ids`)."""
        if any(len(r) != 1 for r in self._recorded):
            raise RuntimeError(f"routing record: expected one router call per MoE layer, got "
                               f"{[len(r) for r in self._recorded]}")
        out = torch.stack([r[0] for r in self._recorded], dim=1)
        self._recorded = [[] for _ in self.routers]
        return out

    def agreement(self, device: Any = "cpu", group: Any = None) -> float | None:
        """Fraction of replayed expert choices the routers would have made themselves since
        the last call, over every rank of ``group`` (a collective when it has several ranks:
        every rank calls it; counted on ``device``, as an nccl group reduces device tensors);
        None when nothing was replayed. Resets the count."""
        counts = torch.zeros(2, dtype=torch.float64, device=device)
        for a in self._agree:
            counts += a.to(device=device, dtype=torch.float64)
        self._agree = []
        if dist.is_initialized() and dist.get_world_size(group) > 1:
            dist.all_reduce(counts, group=group)
        same, total = counts.tolist()
        return same / total if total else None
