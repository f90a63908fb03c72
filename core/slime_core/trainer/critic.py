"""The ``torch`` backend's critic: the policy's Hugging Face backbone with a linear value head.

What ``TrainerBackendRecord.critic_factory`` of the ``torch`` record builds
(:class:`slime_hookspecs.CriticModel`): a :class:`ValueModel` (or the module
``slime_make_model(config, role="critic")`` returns) and its AdamW, replicated on every
data-parallel rank and stepped with :class:`~slime_core.trainkit.accumulate.Accumulation`.

Contract shared with ``slime_make_model(config, role="critic")``: a module whose
``forward(input_ids=..., attention_mask=...)`` returns an object with ``.logits`` holding one
value per position, shaped ``[B, L]`` or ``[B, L, 1]``.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import torch
from slime_hookspecs import CriticLossFn, CriticSpec

from slime_core.context import get_manager
from slime_core.models.loading import load_causal_lm, resolve_dtype
from slime_core.trainkit import data_parallel
from slime_core.trainkit.accumulate import Accumulation
from slime_core.trainkit.batching import micro_batches
from slime_core.trainkit.health import check_finite_weights
from slime_core.trainkit.master import make_adamw

# Seed offset of init = "random", so its weights differ from an init_config policy's.
RANDOM_INIT_SEED_OFFSET = 1
MODEL_FILE = "critic.safetensors"
STATE_FILE = "critic_state.pt"


class ValueModel(torch.nn.Module):
    """``backbone`` (a transformers base model) + ``value_head`` (hidden -> 1)."""

    def __init__(self, backbone: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = torch.nn.Linear(hidden_size, 1)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> SimpleNamespace:
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        )
        return SimpleNamespace(logits=self.value_head(out.last_hidden_state).squeeze(-1))


def _random_causal_lm(model_cfg: Any, dtype: torch.dtype, seed: int) -> torch.nn.Module:
    """The policy's architecture with fresh seeded weights (``init = "random"``)."""
    if model_cfg.init_config:
        return load_causal_lm(model_cfg, torch.device("cpu"), dtype, role="critic", seed=seed)
    from transformers import AutoConfig, AutoModelForCausalLM

    if not model_cfg.path:
        raise ValueError("critic init 'random': set model.path or model.init_config")
    trust = bool(model_cfg.trust_remote_code)
    hf_config = AutoConfig.from_pretrained(model_cfg.path, trust_remote_code=trust)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lm = AutoModelForCausalLM.from_config(
            hf_config, trust_remote_code=trust, dtype=torch.float32
        )
    return lm.to(dtype=dtype)


def build_value_model(config: Any, spec: CriticSpec, device: torch.device,
                      dtype: torch.dtype) -> ValueModel:
    """The Hugging Face critic of ``spec`` on ``device`` (train mode).

    ``spec.init = "policy"``: the backbone of ``config.model`` (``model.path`` weights, or
    ``init_config`` built with ``spec.seed``, i.e. exactly the policy's initial weights).
    ``"random"``: the same architecture, weights seeded with ``spec.seed + 1``. The head is
    ``N(0, 1/(hidden + 1))`` (OpenRLHF's value-head init) with bias 0, seeded with
    ``spec.seed``; RNG is forked so the caller's random stream is untouched. Other backends
    convert this model's weights into their own layout, so every backend starts from the
    same critic.
    """
    seed = int(spec.seed)
    if spec.init == "policy":
        lm = load_causal_lm(config.model, torch.device("cpu"), dtype, role="critic", seed=seed)
    else:
        lm = _random_causal_lm(config.model, dtype, seed + RANDOM_INIT_SEED_OFFSET)
    backbone = lm.base_model
    if backbone is lm:
        raise ValueError(
            f"critic: {type(lm).__name__} exposes no base model (base_model_prefix "
            f"{getattr(lm, 'base_model_prefix', '')!r}); provide the critic through "
            "slime_make_model(config, role='critic')"
        )
    hidden = int(lm.config.get_text_config().hidden_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ValueModel(backbone, hidden)
        torch.nn.init.normal_(model.value_head.weight, std=1.0 / (hidden + 1))
        torch.nn.init.zeros_(model.value_head.bias)
    return model.to(device=device, dtype=dtype).train()


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
    ids = torch.zeros((len(tokens), max(lengths)), dtype=torch.long, device=device)
    attn = torch.zeros_like(ids)
    for row, t in enumerate(tokens):
        ids[row, : lengths[row]] = t.to(device)
        attn[row, : lengths[row]] = 1
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
        group = data_parallel.data_parallel_group()
        dp = data_parallel.active(self.config.train.num_ranks, group)
        self.optimizer.zero_grad(set_to_none=True)
        acc = Accumulation(len(tokens), sum(float(m.sum()) for m in loss_masks), dp,
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

        from slime_core.weights.tensors import untie

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
