"""The critic of one trainer rank: its value model, its AdamW, training and checkpoints."""

from __future__ import annotations

import os
from typing import Any

import torch
from slime_core.api import Accumulation, dp_active, get_registries, micro_batches, step_indices

from slime_ppo import ops
from slime_ppo.value_model import build_value_model, response_values

MODEL_FILE = "critic.safetensors"
STATE_FILE = "critic_state.pt"


class Critic:
    """Value model + optimizer, on the trainer rank's device.

    The model comes from ``slime_make_model(config, role="critic")`` when a plugin answers, else
    from ``ppo.critic_init`` (see :func:`slime_ppo.value_model.build_value_model`).
    """

    def __init__(
        self, config: Any, device: torch.device, dtype: torch.dtype, manager: Any = None
    ) -> None:
        self.config = config
        custom = manager.hook.slime_make_model(config=config, role="critic") if manager else None
        model = custom if custom is not None else build_value_model(config, device, dtype)
        self.model: torch.nn.Module = model.to(device).train()
        t, p = config.train, config.ppo
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=p.critic_lr,
            betas=tuple(t.adam_betas),
            eps=t.adam_eps,
            weight_decay=p.critic_weight_decay,
        )

    # -- values ----------------------------------------------------------------------------
    def values(self, tokens: list[torch.Tensor], response_lengths: list[int]) -> list[torch.Tensor]:
        """Values of the response tokens with the current weights, float32 on the CPU."""
        out: list[torch.Tensor | None] = [None] * len(tokens)
        with torch.no_grad():
            for mb in micro_batches([int(t.numel()) for t in tokens], self._budget()):
                vals = response_values(
                    self.model, [tokens[i] for i in mb], [response_lengths[i] for i in mb]
                )
                for i, v in zip(mb, vals, strict=True):
                    out[i] = v.cpu()
        return out  # type: ignore[return-value]

    def _budget(self) -> int:
        return self.config.ppo.critic_micro_batch_tokens or self.config.train.micro_batch_tokens

    # -- training --------------------------------------------------------------------------
    def train(
        self,
        tokens: list[torch.Tensor],
        response_lengths: list[int],
        loss_masks: list[torch.Tensor],
        old_values: list[torch.Tensor],
        returns: list[torch.Tensor],
    ) -> dict[str, float]:
        """``train.num_steps_per_rollout`` AdamW steps on the clipped value loss; mean metrics.

        Samples are split into mini-batches as the actor splits them (sample ``i`` goes to step
        ``i % num_steps``), each step micro-batched by ``ppo.critic_micro_batch_tokens``. The
        value loss uses ``algorithm.loss_reducer``; micro-batches are weighted by their share
        of masked tokens (``token_mean``) or of samples (the per-sample modes), so the
        accumulated gradient equals that of the whole mini-batch at once.

        Data parallelism (``train.num_ranks > 1``): shares are weighted by the mini-batch's
        totals over all ranks and the gradients summed over ranks before clipping, as for the
        actor, so every rank takes the single-process step; every rank runs every step, also
        with an empty share.
        """
        cfg = self.config
        # the actor's loss reducer (one implementation for every algorithm, by record)
        reducer_rec = get_registries().loss_reducer.get(cfg.algorithm.loss_reducer)
        weighting = reducer_rec.extra.get("weighting", "samples")
        clip = cfg.ppo.value_clip or None
        dp = dp_active(cfg.train.num_ranks)
        device = next(self.model.parameters()).device
        sums: dict[str, float] = {}
        done = 0
        for idx in step_indices(len(tokens), cfg.train.num_steps_per_rollout):
            if not idx and not dp:
                continue
            self.optimizer.zero_grad(set_to_none=True)
            acc = Accumulation(len(idx), sum(float(loss_masks[i].sum()) for i in idx), dp,
                               device)
            for mb in micro_batches([int(tokens[i].numel()) for i in idx], self._budget()):
                ids = [idx[j] for j in mb]
                lengths = [response_lengths[i] for i in ids]
                masks = [loss_masks[i] for i in ids]
                values = response_values(self.model, [tokens[i] for i in ids], lengths)
                reducer = reducer_rec.factory(cfg, lengths, masks)
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
                acc.backward(loss, {f"train/{k}": v for k, v in m.items()},
                             weighting, len(ids),
                             sum(float(mk.sum()) for mk in masks))
            step, grad_norm = acc.step(self.model, self.optimizer, cfg.train.grad_clip)
            step["train/critic_grad_norm"] = grad_norm
            for k, v in step.items():
                sums[k] = sums.get(k, 0.0) + v
            done += 1
        metrics = {k: v / max(done, 1) for k, v in sums.items()}
        metrics["train/critic_lr"] = float(self.optimizer.param_groups[0]["lr"])
        return metrics

    # -- checkpoints -------------------------------------------------------------------------
    def save(self, path: str, extra: dict[str, Any] | None = None) -> None:
        """Write the critic's weights and optimizer (plus ``extra``) under ``path``."""
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.model.state_dict().items()}
        save_file(_untie(state), os.path.join(path, MODEL_FILE))
        torch.save(
            {**(extra or {}), "optimizer": self.optimizer.state_dict()},
            os.path.join(path, STATE_FILE),
        )

    def load(self, path: str) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns the state file's dict (for extra keys)."""
        from safetensors.torch import load_file

        files = [os.path.join(path, f) for f in (MODEL_FILE, STATE_FILE)]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise FileNotFoundError(
                f"slime_ppo: checkpoint {path} has no critic state ({', '.join(missing)} missing); "
                "was it written by a run without the gae estimator?"
            )
        device = next(self.model.parameters()).device
        self.model.load_state_dict(load_file(files[0], device=str(device)), strict=True)
        extra = torch.load(files[1], weights_only=False, map_location=device)
        self.optimizer.load_state_dict(extra["optimizer"])
        return extra


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors sharing storage: give each such tensor its own copy."""
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        ptr = v.data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    return out
