"""The ``torch`` backend's critic: the policy's Hugging Face backbone with a linear value head.

What ``TrainerBackendRecord.critic_factory`` of the ``torch`` record builds
(:class:`slime_hookspecs.CriticModel`): the core's value model
(``slime_core.api.build_value_model``), or the module ``slime_make_model(config,
role="critic")`` returns, and its AdamW, replicated on every data-parallel rank and stepped
with ``slime_core.api.Accumulation``.

Contract shared with ``slime_make_model(config, role="critic")``: a module whose
``forward(input_ids=..., attention_mask=...)`` returns an object with ``.logits`` holding one
value per position, shaped ``[B, L]`` or ``[B, L, 1]``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from slime_core.api import (
    Accumulation,
    build_value_model,
    check_finite_weights,
    data_parallel_group,
    dp_active,
    get_manager,
    make_adamw,
    masked_tokens,
    micro_batches,
    resolve_dtype,
    right_pad,
    untie,
)
from slime_hookspecs import CriticLossFn, CriticSpec

MODEL_FILE = "critic.safetensors"
STATE_FILE = "critic_state.pt"


def response_values(
    model: torch.nn.Module, tokens: list[torch.Tensor], response_lengths: list[int]
) -> list[torch.Tensor]:
    """Per-sample values ``V_t`` of the response tokens, float32 on the model's device.

    ``V_t`` is the critic's output at the position *before* response token ``t`` (the state
    prompt + response[:t] from which token t is generated), the positions whose logits give
    the token's log-prob. Right padding with an attention mask: causal attention never lets a
    real position see the padding, so the pad id does not matter.
    """
    device = next(model.parameters()).device
    lengths = [int(t.numel()) for t in tokens]
    ids, attn = (x.to(device) for x in right_pad(tokens))
    out = model(input_ids=ids, attention_mask=attn).logits
    if out.dim() == 3 and out.size(-1) == 1:
        out = out.squeeze(-1)
    if tuple(out.shape) != tuple(ids.shape):
        raise ValueError(
            f"critic forward returned .logits of shape {tuple(out.shape)}, expected one value per "
            f"position {tuple(ids.shape)} or {tuple(ids.shape) + (1,)} (a custom critic from "
            "slime_make_model(role='critic') must follow that contract)"
        )
    values = []
    for row, (n, r) in enumerate(zip(lengths, response_lengths, strict=True)):
        if r >= n:
            raise ValueError(
                f"critic: sample {row} has {n} tokens and response length {r}; the prompt "
                "must hold at least one token"
            )
        values.append(out[row, n - r - 1 : n - 1].float())
    return values


class TorchCritic:
    """:class:`slime_hookspecs.CriticModel` of the ``torch`` backend: one full replica per
    rank; data parallelism over the default process group (``train.num_ranks > 1``)."""

    def __init__(self, config: Any, model: torch.nn.Module, spec: CriticSpec,
                 device: torch.device) -> None:
        self.config = config
        self.spec = spec
        self.model: torch.nn.Module = model.to(device).train()
        self.device = device
        t = config.train
        self.optimizer = make_adamw(
            self.model.parameters(), t.master_weights, lr=spec.lr, betas=tuple(t.adam_betas),
            eps=t.adam_eps, weight_decay=spec.weight_decay,
        )

    def _budget(self) -> int:
        return self.spec.micro_batch_tokens or self.config.train.micro_batch_tokens

    def values(self, tokens: list[torch.Tensor], response_lengths: list[int]) -> list[torch.Tensor]:
        out: list[torch.Tensor | None] = [None] * len(tokens)
        with torch.no_grad():
            for mb in micro_batches([int(t.numel()) for t in tokens], self._budget()):
                vals = response_values(
                    self.model, [tokens[i] for i in mb], [response_lengths[i] for i in mb]
                )
                for i, v in zip(mb, vals, strict=True):
                    out[i] = v.cpu()
        return out  # type: ignore[return-value]

    def train_step(self, tokens: list[torch.Tensor], response_lengths: list[int],
                   loss_masks: list[torch.Tensor], loss_fn: CriticLossFn,
                   weighting: str) -> tuple[dict[str, float], float]:
        group = data_parallel_group()
        dp = dp_active(self.config.train.num_ranks, group)
        self.optimizer.zero_grad(set_to_none=True)
        acc = Accumulation(len(tokens), masked_tokens(loss_masks), dp,
                           self.device, group)
        for mb in micro_batches([int(t.numel()) for t in tokens], self._budget()):
            values = response_values(self.model, [tokens[i] for i in mb],
                                     [response_lengths[i] for i in mb])
            loss, metrics = loss_fn(mb, values)
            acc.backward(loss, metrics, weighting, len(mb),
                         sum(float(loss_masks[i].sum()) for i in mb))
        metrics, norm = acc.step(self.model, self.optimizer, self.config.train.grad_clip)
        # the critic's own skip (a non-finite value loss or gradient), apart from the actor's
        metrics["train/critic_skipped_steps"] = 0.0 if acc.applied else 1.0
        return metrics, norm

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def save(self, path: str, extra: dict[str, Any] | None = None) -> None:
        """Rank 0 writes (data-parallel replicas are equal): ``critic.safetensors`` and
        ``critic_state.pt`` (AdamW state plus ``extra``)."""
        from safetensors.torch import save_file

        if _rank() != 0:
            return
        os.makedirs(path, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.model.state_dict().items()}
        check_finite_weights(state.items(), os.path.join(path, MODEL_FILE))
        save_file(untie(state), os.path.join(path, MODEL_FILE))
        torch.save({**(extra or {}), "optimizer": self.optimizer.state_dict()},
                   os.path.join(path, STATE_FILE))

    def load(self, path: str) -> dict[str, Any]:
        from safetensors.torch import load_file

        files = [os.path.join(path, f) for f in (MODEL_FILE, STATE_FILE)]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise FileNotFoundError(
                f"critic: checkpoint {path} has no critic state ({', '.join(missing)} missing); "
                "was it written by a run without a critic?"
            )
        self.model.load_state_dict(load_file(files[0], device=str(self.device)), strict=True)
        extra = torch.load(files[1], weights_only=False, map_location=self.device)
        self.optimizer.load_state_dict(extra.pop("optimizer"))
        return dict(extra)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def make_critic(config: Any, model: Any, spec: CriticSpec) -> TorchCritic:
    """``critic_factory`` of the ``torch`` record: on the device of the actor ``model``, in
    ``model.dtype``'s resolution; ``slime_make_model(config, role="critic")`` first."""
    device = next(model.parameters()).device
    custom = get_manager().hook.slime_make_model(config=config, role="critic")
    critic = custom if custom is not None else build_value_model(
        config, spec, device, resolve_dtype(config.model.dtype, device))
    return TorchCritic(config, critic, spec, device)
