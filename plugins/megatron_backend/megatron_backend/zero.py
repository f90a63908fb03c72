"""``megatron.use_distributed_optimizer``: AdamW whose state is sharded over data-parallel ranks.

Megatron's ``DistributedOptimizer`` (ZeRO-1) gives each data-parallel rank the optimizer state
of 1/dp of the parameters' elements. This backend steps torch's AdamW, so the same is done
here for it: the trainable parameters of each dtype are laid end to end (in the order of
``named_parameters``, the same on every rank), the flat vector is cut into ``dp`` equal
chunks, and rank ``r`` keeps an AdamW over the pieces of chunk ``r``. A step

1. reduce-scatters the gradients over the data-parallel group, so each rank holds the summed
   gradient of its chunk only;
2. takes the norm of the whole model from the chunks' squares (summed over data-parallel
   ranks, then over tensor- and pipeline-parallel ranks as :mod:`norm` does) and clips;
3. steps AdamW on the chunk, writes it into the parameters and all-gathers the chunks, so every
   rank holds the whole updated model again.

With ``train.master_weights`` and a bf16/fp16 model the chunk is an fp32 master copy (as in
Megatron's DistributedOptimizer and ``slime_core.api.make_adamw``), kept in ``state_dict``.
AdamW is elementwise, so the result equals the unsharded step's (reductions aside); a parameter
that has no gradient on any rank keeps ``grad = None`` in every chunk, and AdamW skips it as
it would skip the parameter. Only the optimizer state is sharded: the gradients stay full-size
until the reduce-scatter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from slime_core.api import WeightVersions, make_adamw, refresh_copy

from megatron_backend import norm, parallel

# torch 2.13 renamed the flat collectives (the old names warn); the H200 image's 2.11 has only
# the old ones
_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(eq=False)
class _Piece:
    """The part of one parameter that lies in this rank's chunk."""

    name: str
    param: torch.nn.Parameter
    lo: int  # element range in the flattened parameter
    hi: int
    at: int  # offset of the piece in this rank's chunk
    shard: torch.Tensor  # AdamW's parameter for the piece: a leaf copy of those elements


@dataclass(eq=False)
class _Bucket:
    """The parameters of one dtype laid end to end, and this rank's chunk of them."""

    params: list[tuple[str, torch.nn.Parameter]]
    chunk: int  # elements per rank (the flat length rounded up to a multiple of dp)
    pieces: list[_Piece]


def _layout(named: list[tuple[str, torch.nn.Parameter]], rank: int, size: int,
            master_weights: bool = False) -> list[_Bucket]:
    by_dtype: dict[torch.dtype, list[tuple[str, torch.nn.Parameter]]] = {}
    for name, p in named:
        if p.requires_grad:
            by_dtype.setdefault(p.dtype, []).append((name, p))
    buckets = []
    for dtype in sorted(by_dtype, key=str):  # the same order on every rank
        params = by_dtype[dtype]
        total = sum(p.numel() for _, p in params)
        chunk = -(-total // size)
        start, end = rank * chunk, (rank + 1) * chunk
        pieces, offset = [], 0
        for name, p in params:
            lo, hi = max(start, offset), min(end, offset + p.numel())
            if lo < hi:
                shard = p.detach().reshape(-1)[lo - offset:hi - offset].clone()
                if master_weights and shard.dtype != torch.float32:
                    shard = shard.float()  # fp32 master copy of a bf16/fp16 chunk
                pieces.append(_Piece(name, p, lo - offset, hi - offset, lo - start, shard))
            offset += p.numel()
        buckets.append(_Bucket(params, chunk, pieces))
    return buckets


class DistributedAdamW(torch.optim.AdamW):
    """torch's AdamW over this data-parallel rank's chunk of the parameters (see the module).

    Its ``state_dict`` is this rank's shard: a checkpoint holds one per data-parallel rank and
    loads only at the same data-parallel size. ``zero_grad`` also clears the model's gradients,
    so a trainer calls it as it would call AdamW's."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]], group: Any, rank: int,
                 size: int, master_weights: bool = False, **adamw: Any) -> None:
        self.group, self.dp_rank, self.dp_size = group, rank, size
        self.buckets = _layout(named, rank, size, master_weights)
        self.model_params = [p for _, p in named]
        self.shards = [piece.shard for b in self.buckets for piece in b.pieces]
        # a rank whose chunk is only padding still steps (and gathers); AdamW needs a tensor
        super().__init__(self.shards or [torch.zeros(0)], **adamw)
        self._versions = WeightVersions(self.model_params)
        self._versions.mark()

    @torch.no_grad()
    def reread(self) -> None:
        """Take every weight written from outside into this rank's chunk."""
        self._refresh(range(len(self.model_params)))

    def _refresh(self, indices: Any) -> None:
        written = {id(self.model_params[i]) for i in indices}
        for piece in (pc for b in self.buckets for pc in b.pieces):
            if id(piece.param) in written:
                refresh_copy(piece.shard, piece.param.detach().reshape(-1)[piece.lo:piece.hi])
        self._versions.mark()

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for p in self.model_params:
            p.grad = None if set_to_none else (p.grad.zero_() if p.grad is not None else None)

    def reduce_clip_step(self, sharded_names: set[str], skip: frozenset[str], pp_group: Any,
                         grad_clip: float,
                         should_step: Callable[[float], bool] | None = None) -> float:
        """Reduce-scatter, norm of the whole model, clip, step, all-gather; the norm before
        clipping. A collective of the data-parallel group (and of the TP / PP groups for the
        norm). ``should_step(norm)`` (every rank must answer alike: the trainer's agreed
        health verdict) may refuse the step: then neither the chunk nor the weights change."""
        # only the weights written since the last step (a checkpoint load, a hook)
        self._refresh(self._versions.changed())
        present = self._present()
        grads: list[tuple[str, torch.Tensor]] = []
        for bucket in self.buckets:
            mine = self._reduce_scatter(bucket)
            for piece in bucket.pieces:
                if not present[id(piece.param)]:
                    piece.shard.grad = None
                    continue
                piece.shard.grad = mine[piece.at:piece.at + piece.hi - piece.lo].to(
                    piece.shard.dtype)
                if piece.name not in skip:
                    grads.append((piece.name, piece.shard.grad))
        sq = norm.squares(grads, sharded_names, self._device())
        dist.all_reduce(sq, group=self.group)  # the chunks' squares: the whole stage's
        total = norm.model_norm(sq, pp_group)
        if should_step is not None and not should_step(total):
            return total
        norm.clip_((shard.grad for shard in self.shards), total, grad_clip)
        self.step()
        self._all_gather()
        self._versions.mark()
        return total

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["chunk"] = [piece.shard.detach().clone() for b in self.buckets for piece in b.pieces]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        chunk = state.pop("chunk", None)
        pieces = [piece for b in self.buckets for piece in b.pieces]
        if chunk is None or [c.shape for c in chunk] != [p.shard.shape for p in pieces]:
            raise ValueError("optimizer state without this rank's chunk of the weights (saved "
                             "by another optimizer or data-parallel layout)")
        super().load_state_dict(state)
        with torch.no_grad():
            for piece, saved in zip(pieces, chunk, strict=True):
                piece.shard.copy_(saved)

    def _device(self) -> torch.device:
        return self.model_params[0].device if self.model_params else torch.device("cpu")

    def _present(self) -> dict[int, bool]:
        """Which parameters have a gradient on some data-parallel rank."""
        params = [p for b in self.buckets for _, p in b.params]
        flags = torch.tensor([p.grad is not None for p in params], dtype=torch.float32,
                             device=self._device())
        dist.all_reduce(flags, group=self.group)
        return {id(p): bool(f) for p, f in zip(params, flags.tolist(), strict=True)}

    def _reduce_scatter(self, bucket: _Bucket) -> torch.Tensor:
        first = bucket.params[0][1]
        flat = torch.zeros(bucket.chunk * self.dp_size, dtype=first.dtype, device=first.device)
        offset = 0
        for _, p in bucket.params:
            if p.grad is not None:
                flat[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
            offset += p.numel()
        mine = torch.empty(bucket.chunk, dtype=first.dtype, device=first.device)
        _scatter_flat(mine, flat, group=self.group)
        return mine

    @torch.no_grad()
    def _all_gather(self) -> None:
        for bucket in self.buckets:
            first = bucket.params[0][1]
            mine = torch.zeros(bucket.chunk, dtype=first.dtype, device=first.device)
            for piece in bucket.pieces:
                mine[piece.at:piece.at + piece.hi - piece.lo].copy_(piece.shard)
            flat = torch.empty(bucket.chunk * self.dp_size, dtype=first.dtype,
                               device=first.device)
            _gather_flat(flat, mine, group=self.group)
            offset = 0
            for _, p in bucket.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()


def make_optimizer(model: torch.nn.Module, config: Any, lr: float,
                   weight_decay: float) -> torch.optim.Optimizer:
    """The rank's AdamW over ``model``: :class:`DistributedAdamW` when
    ``megatron.use_distributed_optimizer`` is set and there are several data-parallel ranks
    (fp32 master chunks of a bf16 model with ``train.master_weights``), else
    ``slime_core.api.make_adamw`` (fp32 master
    weights for a bf16 model with ``train.master_weights``; one data-parallel rank: nothing to
    shard)."""
    t = config.train
    adamw = {"lr": lr, "betas": tuple(t.adam_betas), "eps": t.adam_eps,
             "weight_decay": weight_decay}
    if config.megatron.use_distributed_optimizer and parallel.dp_size() > 1:
        return DistributedAdamW(list(model.named_parameters()), parallel.dp_group(),
                                parallel.dp_rank(), parallel.dp_size(),
                                master_weights=bool(t.master_weights), **adamw)
    return make_adamw(model.parameters(), t.master_weights, **adamw)
