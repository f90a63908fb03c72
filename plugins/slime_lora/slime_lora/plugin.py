"""Entry point of the ``slime_lora`` plugin: LoRA RL on peft, entirely through hooks.

Kept light (``core plugins`` never imports torch or peft): the work lives in
``slime_lora.model`` (trainer side), ``slime_lora.merge`` (engine side),
``slime_lora.validate`` (checks before the model loads) and ``slime_lora.export``, imported
inside the hooks, and only in runs with ``lora.enabled``.

How a LoRA run flows (``--plugins slime_grpo,slime_lora -o lora.enabled=true``):

* ``slime_configure`` (driver): refuses backends and settings LoRA cannot honour, builds the
  model on the meta device to check the targets, peft's wrapping and an init adapter's shapes;
* ``slime_make_model`` (trainer rank): ``actor`` is the peft-wrapped model, ``ref`` the same
  module with adapters off (no second copy; ``model.ref_path`` still loads its own);
* ``slime_trainer_weights`` (trainer rank): syncs and checkpoints carry the adapters only;
* ``slime_engine_weights`` (engine process): merges them into the ``local`` engine's base
  layers;
* ``slime_engine_adapter`` (engine process): for engines that serve LoRA themselves (``vllm``,
  ``sglang``), the rank and a writer of each sync's adapter as a PEFT directory they load;
* ``slime_trainer_save`` (rank 0): the checkpoint also holds the adapter in PEFT format;
* ``slime_run_end`` (driver): ``lora.export_merged`` writes the merged HF model.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from slime_hookspecs import Config, ConfigSection, EngineAdapter, hookimpl

from slime_lora.config import LoraSection, active, check_combinations


@hookimpl
def slime_add_config(schema: Any) -> list[ConfigSection]:
    return [ConfigSection(
        name="lora", schema=LoraSection,
        summary="LoRA adapters (peft): rank, alpha, dropout, target presets, initial adapter, "
                "merged export")]


@hookimpl
def slime_configure(config: Config) -> None:
    if not active(config):
        return
    check_combinations(config)
    from slime_lora import validate

    validate.check_config(config)


@hookimpl
def slime_make_model(config: Config, role: str) -> Any:
    if not active(config):
        return None
    from slime_lora import model

    if role == "actor":
        return model.build_policy(config)
    if role == "ref" and not config.model.ref_path:
        policy = model.policy_for(config)
        if policy is None:
            raise RuntimeError("slime_lora: the reference was asked for before the policy was "
                               "built in this trainer process")
        return model.AdaptersOff(policy)
    return None  # a critic, a teacher, a reference of its own: the backend's loader


@hookimpl
def slime_trainer_weights(config: Config, model: Any) -> dict[str, Any] | None:
    if not active(config):
        return None
    from slime_lora.model import adapter_state, peft_of

    return adapter_state(model) if peft_of(model) is not None else None


@hookimpl
def slime_engine_weights(config: Config, model: Any, weights: Mapping[str, Any],
                         version: int) -> Mapping[str, Any] | None:
    if not active(config):
        return None
    from slime_lora.merge import merged_weights

    return merged_weights(model, weights, config.lora.scaling(), version)


@hookimpl
def slime_engine_adapter(config: Config) -> EngineAdapter | None:
    if not active(config):
        return None
    from slime_lora.serve import engine_adapter

    return engine_adapter(config)


@hookimpl
def slime_trainer_save(config: Config, path: str, rank: int) -> None:
    if not active(config) or rank != 0:
        return
    from slime_lora.model import policy_for, save_peft

    policy = policy_for(config)
    if policy is not None:
        save_peft(policy, path)


@hookimpl
def slime_run_end(config: Config, run_dir: str, status: str) -> None:
    if not active(config) or not config.lora.export_merged or status != "completed":
        return
    from slime_lora.export import export_merged

    print(f"slime_lora: merged model written to {export_merged(config, run_dir)}",
          file=sys.stderr)
