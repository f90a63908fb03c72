"""The critic network: the policy's backbone with a linear value head, and its per-token values.

Contract shared with ``slime_make_model(config, role="critic")``: a module whose
``forward(input_ids=..., attention_mask=...)`` returns an object with ``.logits`` holding one
value per position, shaped ``[B, L]`` or ``[B, L, 1]``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from slime_core.api import load_causal_lm

# Seed offset of critic_init = "random", so its weights differ from an init_config policy's.
RANDOM_INIT_SEED_OFFSET = 1


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
    """The policy's architecture with fresh seeded weights (``critic_init = "random"``)."""
    if model_cfg.init_config:
        return load_causal_lm(model_cfg, torch.device("cpu"), dtype, role="critic", seed=seed)
    from transformers import AutoConfig, AutoModelForCausalLM

    if not model_cfg.path:
        raise ValueError("ppo.critic_init = 'random': set model.path or model.init_config")
    trust = bool(getattr(model_cfg, "trust_remote_code", False))
    hf_config = AutoConfig.from_pretrained(model_cfg.path, trust_remote_code=trust)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lm = AutoModelForCausalLM.from_config(
            hf_config, trust_remote_code=trust, dtype=torch.float32
        )
    return lm.to(dtype=dtype)


def build_value_model(config: Any, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """The default critic of ``ppo.critic_init`` on ``device`` (train mode).

    ``policy``: the backbone of ``config.model`` (``model.path`` weights, or ``init_config``
    built with ``run.seed``, i.e. exactly the policy's initial weights), as OpenRLHF and slime
    initialise their critic. ``random``: the same architecture, weights seeded with
    ``run.seed + 1``. The head is ``N(0, 1/(hidden + 1))`` (OpenRLHF's value-head init) with
    bias 0, seeded with ``run.seed``; RNG is forked so the caller's random stream is untouched.
    """
    seed = int(config.run.seed)
    if config.ppo.critic_init == "policy":
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
