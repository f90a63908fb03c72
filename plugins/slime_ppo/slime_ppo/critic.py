"""The critic of one trainer rank: the trainer backend's value model, trained on the value loss.

The value model, its optimizer, micro-batching, the reductions over the backend's process
groups and checkpoints belong to the trainer backend (``TrainerBackendRecord.critic_factory``,
a :class:`slime_hookspecs.CriticModel`: the ``torch`` backend's Hugging Face value model,
the ``megatron`` backend's GPTModel with a value head, TP-sharded like its actor). What is
PPO's stays here: the clipped value loss, its reducer, how samples split into optimizer steps.
"""

from __future__ import annotations

from typing import Any

import torch
from slime_core.api import data_parallel_group, dp_active, get_registries, step_indices
from slime_hookspecs import CriticModel, CriticSpec

from slime_ppo import ops
from slime_ppo.config import algorithm


def critic_spec(config: Any) -> CriticSpec:
    """The ``[ppo]`` keys a backend needs to build the critic."""
    p = config.ppo
    return CriticSpec(lr=p.critic_lr, weight_decay=p.critic_weight_decay, init=p.critic_init,
                      seed=int(config.run.seed), micro_batch_tokens=p.critic_micro_batch_tokens)


def build_critic(config: Any, model: Any) -> Critic:
    """The critic next to the actor ``model`` (what ``slime_trainer_init`` received), from the
    ``train.backend`` record's ``critic_factory``."""
    record = get_registries().trainer_backend.get(config.train.backend)
    factory = getattr(record, "critic_factory", None)
    if factory is None:
        raise RuntimeError(
            f"slime_ppo: trainer backend {config.train.backend!r} (plugin {record.owner}) "
            "offers no critic (TrainerBackendRecord.critic_factory is None); "
            "algorithm.advantage_estimator = 'gae' needs one"
        )
    return Critic(config, factory(config, model, critic_spec(config)))


class Critic:
    """PPO's side of the critic: values and the value-loss update of a backend's
    :class:`~slime_hookspecs.CriticModel` (``impl``)."""

    def __init__(self, config: Any, impl: CriticModel) -> None:
        self.config = config
        self.impl = impl

    def values(self, tokens: list[torch.Tensor], response_lengths: list[int]) -> list[torch.Tensor]:
        """Values of the response tokens with the current weights, float32 on the CPU."""
        return self.impl.values(tokens, response_lengths)  # type: ignore[no-any-return]

    def train(
        self,
        tokens: list[torch.Tensor],
        response_lengths: list[int],
        loss_masks: list[torch.Tensor],
        old_values: list[torch.Tensor],
        returns: list[torch.Tensor],
    ) -> dict[str, float]:
        """``train.num_steps_per_rollout`` optimizer steps on the clipped value loss; mean metrics.

        Samples are split into mini-batches as the actor splits them (sample ``i`` goes to step
        ``i % num_steps``); the backend micro-batches each step by
        ``ppo.critic_micro_batch_tokens``. The value loss uses ``algorithm.loss_reducer``;
        micro-batches are weighted by their share of masked tokens (``token_mean``) or of
        samples (the per-sample modes), so the accumulated gradient equals that of the whole
        mini-batch at once.

        Data parallelism (``train.num_ranks > 1``): the backend weights shares by the
        mini-batch's totals over its data-parallel ranks and sums the gradients over them
        before clipping, as for the actor; every rank runs every step, also with an empty
        share.
        """
        cfg = self.config
        # the actor's loss reducer (one implementation for every algorithm, by record)
        reducer_rec = get_registries().loss_reducer.get(algorithm(cfg).loss_reducer)
        weighting = reducer_rec.extra.get("weighting", "samples")
        clip = cfg.ppo.value_clip or None
        dp = dp_active(cfg.train.num_ranks, data_parallel_group())
        sums: dict[str, float] = {}
        done = 0
        for idx in step_indices(len(tokens), cfg.train.num_steps_per_rollout):
            if not idx and not dp:
                continue

            def loss_fn(mb: list[int], values: list[torch.Tensor],
                        idx: list[int] = idx) -> tuple[torch.Tensor, dict[str, Any]]:
                ids = [idx[j] for j in mb]
                device = values[0].device
                masks = [loss_masks[i] for i in ids]
                reducer = reducer_rec.factory(cfg, [response_lengths[i] for i in ids], masks)
                loss, m = ops.value_loss(
                    values,
                    [old_values[i].to(device) for i in ids],
                    [returns[i].to(device) for i in ids],
                    [mk.to(device) for mk in masks],
                    value_clip=clip,
                    coef=cfg.ppo.value_loss_coef,
                    reducer=reducer,
                    clipfrac_rule=cfg.ppo.value_clipfrac,
                )
                return loss, {f"train/{k}": v for k, v in m.items()}

            step, grad_norm = self.impl.train_step(
                [tokens[i] for i in idx], [response_lengths[i] for i in idx],
                [loss_masks[i] for i in idx], loss_fn, weighting)
            step["train/critic_grad_norm"] = grad_norm
            for k, v in step.items():
                sums[k] = sums.get(k, 0.0) + v
            done += 1
        # skipped steps (a non-finite value loss or gradient: the backend took no step) are
        # counted, every other metric averaged
        metrics = {k: v if k == "train/critic_skipped_steps" else v / max(done, 1)
                   for k, v in sums.items()}
        metrics["train/critic_lr"] = self.impl.lr()
        return metrics

    # -- checkpoints -------------------------------------------------------------------------
    def save(self, path: str, extra: dict[str, Any] | None = None) -> None:
        """The backend writes the critic's weights and optimizer (plus ``extra``) under ``path``."""
        self.impl.save(path, extra)

    def load(self, path: str) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns ``extra``."""
        return self.impl.load(path)  # type: ignore[no-any-return]
