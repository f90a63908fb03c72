"""The Hugging Face critic of a ``CriticSpec``: the policy's backbone with a linear value head.

What every trainer backend's critic starts from (``slime_core.api.build_value_model``): the
``torch`` backend of slime-std trains it as it is, other backends (megatron) convert its
weights into their own layout.

Contract shared with ``slime_make_model(config, role="critic")``: a module whose
``forward(input_ids=..., attention_mask=...)`` returns an object with ``.logits`` holding one
value per position, shaped ``[B, L]`` or ``[B, L, 1]``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import torch
from slime_hookspecs import CriticSpec

from slime_core.models.loading import load_causal_lm

# Seed offset of init = "random", so its weights differ from an init_config policy's.
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
    backbone: Any = lm.base_model
    if backbone is lm:
        raise ValueError(
            f"critic: {type(lm).__name__} exposes no base model (base_model_prefix "
            f"{getattr(lm, 'base_model_prefix', '')!r}); provide the critic through "
            "slime_make_model(config, role='critic')"
        )
    hidden = int(cast(Any, lm.config).get_text_config().hidden_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ValueModel(backbone, hidden)
        torch.nn.init.normal_(model.value_head.weight, std=1.0 / (hidden + 1))
        torch.nn.init.zeros_(model.value_head.bias)
    return model.to(device=device, dtype=dtype).train()
