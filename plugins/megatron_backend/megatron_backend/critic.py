"""The megatron backend's critic: a GPTModel whose output layer is a value head, sharded like
the actor (``TrainerBackendRecord.critic_factory``, a :class:`slime_hookspecs.CriticModel`).

The trunk is the actor's architecture, TP-sharded and split into the same pipeline stages by
the same converter; its weights come from the ``torch`` backend's Hugging Face critic
(``slime_core.api.build_value_model``: the policy's checkpoint for ``init = "policy"``, a
seeded fresh model for ``"random"``, the head ``N(0, 1/(hidden + 1))`` seeded with
``run.seed``), so both backends start from the same critic.

The head is a plain ``Linear(hidden, 1)`` after the final norm, replicated on every TP rank:
without sequence parallelism the final norm's output is replicated, so every TP rank computes
the same values, and the gradient it sends into the trunk is already the full one (the
trunk's row-/column-parallel layers then reduce exactly as for the actor, whose loss is
replicated too). A column-parallel head cannot split one output over TP ranks.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
import torch.distributed as dist
from slime_core.api import (
    build_value_model,
    get_manager,
    masked_tokens,
    micro_batches,
    resolve_dtype,
)
from slime_hookspecs import CriticLossFn, CriticSpec

from megatron_backend import checkpoint, parallel
from megatron_backend.convert import megatron_names, to_megatron
from megatron_backend.forward import pack
from megatron_backend.gather import load_local_state, local_state
from megatron_backend.layout import Layout, layout_of
from megatron_backend.model import build_gpt
from megatron_backend.optim import Accumulation
from megatron_backend.pipeline import StagePass, Stages
from megatron_backend.zero import make_optimizer

HEAD = ("output_layer.weight", "output_layer.bias")
EXTRA_FILE = "critic_extra.pt"


class ValueHead(torch.nn.Module):
    """In place of ``GPTModel.output_layer``: hidden ``[s, b, h]`` -> values ``[s, b, 1]``,
    called as GPTModel calls its output layer (``weight`` / ``runtime_gather_output`` are
    the vocabulary projection's and ignored)."""

    def __init__(self, hidden: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1, hidden, dtype=dtype, device=device))
        self.bias = torch.nn.Parameter(torch.zeros(1, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor, weight: Any = None,
                runtime_gather_output: Any = None) -> tuple[torch.Tensor, None]:
        return torch.nn.functional.linear(x, self.weight, self.bias), None


def critic_names(layout: Layout, stage: int, stages: int) -> dict[str, int | None]:
    """The critic's parameters on this stage and their TP split (the head is replicated)."""
    names = {k: v for k, v in megatron_names(dataclasses.replace(layout, tied=True), stage,
                                             stages).items() if k != "output_layer.weight"}
    if stage == stages - 1:
        names.update(dict.fromkeys(HEAD))
    return names


class MegatronCritic:
    """:class:`slime_hookspecs.CriticModel` on megatron-core, one rank of it."""

    def __init__(self, config: Any, model_list: Any, spec: CriticSpec) -> None:
        from megatron_backend.trainer import hf_config_of

        self.config, self.spec, self.mg = config, spec, config.megatron
        if parallel.ep_size() > 1:
            raise ValueError(f"megatron.expert_model_parallel_size = {parallel.ep_size()}: the "
                             "megatron critic (slime_ppo) does not split experts yet; set it to 1 "
                             "for a run with a critic")
        self.device = next(model_list.parameters()).device
        self.dtype = resolve_dtype(config.model.dtype, self.device)
        self.layout = layout_of(hf_config_of(config.model), parallel.tp_size(),
                                self.mg.make_vocab_size_divisible_by)
        self.stages = st = Stages()
        state = torch.get_rng_state()  # building the critic must not shift the sampling stream
        try:
            self.model = self._build()
        finally:
            torch.set_rng_state(state)
        self.model.train()
        self.sharded_names = {k for k, s in critic_names(self.layout, st.rank, st.size).items()
                              if s is not None}
        self.optimizer = make_optimizer(self.model, config, spec.lr, spec.weight_decay)

    def _build(self) -> Any:
        st, layout = self.stages, self.layout
        model = get_manager().hook.slime_make_model(config=self.config, role="critic")
        if model is None:
            # untied: the vocabulary projection is replaced, never shared with the embedding
            model = build_gpt(dataclasses.replace(layout, tied=False), self.dtype, self.mg,
                              self.device, st.first, st.last)
            if st.last:
                model.output_layer = ValueHead(layout.hidden, self.dtype, self.device)
        hf = build_value_model(self.config, self.spec, torch.device("cpu"), torch.float32)
        trunk = {f"model.{k}": v for k, v in hf.backbone.state_dict().items()}
        # converted as if tied: no lm_head to read; a later stage's copy of the embedding
        # (tied PP) is not a critic parameter
        shard = to_megatron(trunk, dataclasses.replace(layout, tied=True), parallel.tp_rank(),
                            parallel.tp_size(), st.rank, st.size)
        shard.pop("output_layer.weight", None)
        if st.last:
            shard[HEAD[0]] = hf.value_head.weight.detach().clone()
            shard[HEAD[1]] = hf.value_head.bias.detach().clone()
        del hf, trunk
        load_local_state(model, {k: v.to(self.dtype) for k, v in shard.items()})
        return model.to(self.device)

    def _budget(self) -> int:
        return self.spec.micro_batch_tokens or self.config.train.micro_batch_tokens

    def _forward(self, tokens: list[torch.Tensor], response_lengths: list[int]
                 ) -> tuple[StagePass, list[torch.Tensor] | None]:
        """One micro-batch: the pass (for its backward) and, on the last stage, the values."""
        p = pack(tokens, response_lengths, 0, self.device)
        sp = StagePass(self.stages, self.model, self.layout.hidden, self.dtype)
        out = sp.forward(p.ids, p.positions, p.mask)  # [b, s, 1] on the last stage
        if out is None:
            return sp, None
        return sp, list(out[p.rows, p.cols, 0].float().split(p.resp))

    def values(self, tokens: list[torch.Tensor], response_lengths: list[int]) -> list[torch.Tensor]:
        out: list[torch.Tensor | None] = [None] * len(tokens)
        with torch.no_grad():
            for mb in micro_batches([int(t.numel()) for t in tokens], self._budget()):
                _, vals = self._forward([tokens[i] for i in mb],
                                        [response_lengths[i] for i in mb])
                for i, v in zip(mb, vals or [], strict=False):
                    out[i] = v.cpu()
        return self.stages.broadcast_from_last(out)  # type: ignore[no-any-return]

    def train_step(self, tokens: list[torch.Tensor], response_lengths: list[int],
                   loss_masks: list[torch.Tensor], loss_fn: CriticLossFn,
                   weighting: str) -> tuple[dict[str, float], float]:
        self.optimizer.zero_grad(set_to_none=True)
        acc = Accumulation(len(tokens), masked_tokens(loss_masks), self.device)
        for mb in micro_batches([int(t.numel()) for t in tokens], self._budget()):
            sp, vals = self._forward([tokens[i] for i in mb], [response_lengths[i] for i in mb])
            if vals is not None:
                loss, metrics = loss_fn(mb, vals)
                acc.backward(loss, metrics, weighting, len(mb),
                             sum(float(loss_masks[i].sum()) for i in mb))
            sp.backward()
        metrics, norm = acc.step(dict(self.model.named_parameters()), self.sharded_names,
                                 self.optimizer, self.config.train.grad_clip, self.stages, None)
        # the critic's own skip (a non-finite value loss or gradient), apart from the actor's
        metrics["train/critic_skipped_steps"] = 0.0 if acc.applied else 1.0
        return metrics, norm

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # -- checkpoints: the actor's layout (a shard per TP index and PP stage) ------------------
    def _shard_file(self, path: str) -> str:
        return os.path.join(path, f"mp_rank_{parallel.tp_rank():02d}_{self.stages.rank:03d}",
                            "critic_optim.pt")

    def save(self, path: str, extra: dict[str, Any] | None = None) -> None:
        """Data-parallel rank 0 of each TP shard and stage writes its shard and AdamW state;
        global rank 0 writes ``extra``."""
        if parallel.dp_rank() == 0:
            f = self._shard_file(path)
            os.makedirs(os.path.dirname(f), exist_ok=True)
            torch.save({"model": {k: v.cpu() for k, v in local_state(self.model).items()},
                        "optimizer": checkpoint.unsharded_state(self.optimizer),
                        "layout": dataclasses.asdict(self.layout)}, f)
        checkpoint.save_optimizer_shard(self.optimizer, self._shard_file(path))
        if dist.get_rank() == 0:
            os.makedirs(path, exist_ok=True)
            torch.save(dict(extra or {}), os.path.join(path, EXTRA_FILE))

    def load(self, path: str) -> dict[str, Any]:
        f = self._shard_file(path)
        if not os.path.isfile(f):
            raise FileNotFoundError(f"megatron critic: checkpoint {path} has no critic shard {f} "
                                    "(written by a run without a critic, or with other TP/PP "
                                    "sizes?)")
        state = torch.load(f, weights_only=False, map_location="cpu")
        if state["layout"] != dataclasses.asdict(self.layout):
            raise ValueError(f"megatron critic: checkpoint {path} was written for another model "
                             f"layout ({state['layout']})")
        load_local_state(self.model, state["model"])
        checkpoint.load_optimizer(self.optimizer, state["optimizer"], f)
        extra_file = os.path.join(path, EXTRA_FILE)
        return dict(torch.load(extra_file, weights_only=False)) if os.path.isfile(extra_file) \
            else {}


def make_critic(config: Any, model: Any, spec: CriticSpec) -> MegatronCritic:
    """``critic_factory`` of the ``megatron`` record (``model``: the actor's model list)."""
    return MegatronCritic(config, model, spec)
