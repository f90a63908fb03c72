"""``train.routing_replay`` checked before any model loads.

Replay needs three things: a model with experts (read from its transformers config: the
``model.path`` directory's ``config.json`` or ``model.init_config``, no weights), an engine
whose record says it records routing and a trainer backend whose record says it replays
(``RolloutEngineRecord.routing_replay``, ``TrainerBackendRecord.routing_replay``). Each
missing one fails here, naming the key and the record, so a misconfigured run stops before a
run directory or a model exists.
"""

from __future__ import annotations

from typing import Any

from slime_core.moe.routing import MoeShape, config_moe_shape


def hf_config(model_cfg: Any) -> Any:
    """The transformers config ``config.model`` names (``model.path`` or ``init_config``)."""
    from transformers import AutoConfig

    if model_cfg.path:
        return AutoConfig.from_pretrained(model_cfg.path,
                                          trust_remote_code=bool(model_cfg.trust_remote_code))
    init = dict(model_cfg.init_config or {})
    model_type = init.pop("model_type", None)
    if not model_type:
        raise ValueError("model.init_config needs a 'model_type' key")
    return AutoConfig.for_model(model_type, **init)


def model_moe_shape(model_cfg: Any) -> MoeShape | None:
    """The MoE shape of the model ``config.model`` names, from its config alone (None for a
    dense model or one a plugin builds): what an engine serving it elsewhere needs to read
    its routing."""
    if not (model_cfg.path or model_cfg.init_config):
        return None
    return config_moe_shape(hf_config(model_cfg))


def replay_shape(config: Any, engine: str) -> MoeShape | None:
    """The MoE shape an engine serving ``config.model`` in its own process reads the routed
    experts with when ``train.routing_replay = "rollout"`` (None when replay is off); raises
    naming ``engine`` when the config names no mixture-of-experts model."""
    if config.train.routing_replay != "rollout":
        return None
    shape = model_moe_shape(config.model)
    if shape is None:
        raise ValueError(f"{engine} engine: train.routing_replay = 'rollout' needs model.path "
                         "(or model.init_config) of a mixture-of-experts model")
    return shape


def check_routing_replay(manager: Any, config: Any) -> MoeShape | None:
    """Raise ``ValueError`` when ``train.routing_replay = "rollout"`` cannot run; the model's
    MoE shape when it can (None when replay is off)."""
    if config.train.routing_replay == "off":
        return None
    key = f"train.routing_replay = {config.train.routing_replay!r}"
    reg = manager.registries
    backend = reg.trainer_backend.get(config.train.backend, require_available=False)
    if not backend.routing_replay:
        raise ValueError(f"{key}: trainer backend {backend.name!r} (plugin {backend.owner}) "
                         "cannot replay routing; use train.backend = 'torch' or "
                         "train.routing_replay = 'off'")
    engine = reg.rollout_engine.get(config.rollout.engine, require_available=False)
    if not engine.routing_replay:
        raise ValueError(f"{key}: rollout engine {engine.name!r} (plugin {engine.owner}) does "
                         "not record routing; use rollout.engine = 'local', 'sglang' or 'vllm', or "
                         "train.routing_replay = 'off'")
    if not (config.model.path or config.model.init_config):
        return None  # a plugin builds the model (slime_make_model): its trainer checks it
    shape = config_moe_shape(hf_config(config.model))
    if shape is None:
        where = config.model.path or f"model.init_config (model_type {config.model.init_config.get('model_type')!r})"
        raise ValueError(f"{key}: the model {where} has no mixture-of-experts layers (no "
                         "num_experts / num_local_experts with num_experts_per_tok); routing "
                         "replay is for MoE models, set train.routing_replay = 'off'")
    return shape


def check_router_losses(manager: Any, config: Any) -> None:
    """Raise ``ValueError`` when ``train.moe_aux_loss_coef`` or ``train.moe_z_loss_coef`` is
    non-zero for a trainer backend whose record lacks ``router_losses`` or for a model without
    experts (read from its config, before it loads)."""
    t = config.train
    keys = [f"train.{k} = {getattr(t, k)}" for k in ("moe_aux_loss_coef", "moe_z_loss_coef")
            if getattr(t, k)]
    if not keys:
        return
    backend = manager.registries.trainer_backend.get(t.backend, require_available=False)
    if not backend.router_losses:
        raise ValueError(f"{', '.join(keys)}: trainer backend {backend.name!r} (plugin "
                         f"{backend.owner}) does not add router losses; use train.backend = "
                         "'torch' or 'megatron', or set it to 0")
    if not (config.model.path or config.model.init_config):
        return  # a plugin builds the model (the trainer finds no router then)
    if config_moe_shape(hf_config(config.model)) is None:
        where = config.model.path or f"model.init_config (model_type {config.model.init_config.get('model_type')!r})"
        raise ValueError(f"{', '.join(keys)}: the model {where} has no mixture-of-experts "
                         "layers (no router to balance); set it to 0")
