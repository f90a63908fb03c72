"""Entry point of ``megatron_backend``: the ``megatron`` trainer-backend record and ``[megatron]``.

Kept light: neither torch nor megatron is imported here (``core plugins`` stays fast and works
on hosts without megatron-core); the probe only asks the package metadata.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from slime_hookspecs import Config, ConfigSection, TrainerBackendRecord, hookimpl

from megatron_backend.config import BACKEND, MegatronSection, check_config

INSTALL_HINT = ("pip install 'megatron-core>=0.16.1,<0.20' (0.16.1 on Python 3.11, 0.19.x on "
                "3.12); see plugins/megatron_backend/README.md")


def megatron_core_version() -> str | None:
    """The installed megatron-core version, or ``None`` (metadata only: nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("megatron-core")
    except PackageNotFoundError:
        return None


def probe() -> str | None:
    """``None`` when megatron-core is importable here, else why not."""
    if megatron_core_version() is None or importlib.util.find_spec("megatron") is None:
        return f"megatron-core is not installed ({INSTALL_HINT})"
    return None


def make_trainer(config: Config, rank: int = 0, world_size: int = 1, accelerator: Any = None) -> Any:
    """``factory(config, rank, world_size, accelerator)`` of the ``megatron`` record."""
    reason = probe()
    if reason:
        raise RuntimeError(f"trainer backend 'megatron' is unavailable: {reason}")
    from megatron_backend.trainer import MegatronTrainer

    return MegatronTrainer(config, rank, world_size, accelerator)


def make_critic(config: Config, model: Any, spec: Any) -> Any:
    """``critic_factory(config, model, spec)`` of the ``megatron`` record: a GPTModel with a
    value head, sharded like the actor (:mod:`megatron_backend.critic`)."""
    from megatron_backend.critic import make_critic as build

    return build(config, model, spec)


def _summary() -> str:
    have = megatron_core_version()
    core = f"megatron-core {have}" if have else "megatron-core (not installed)"
    return (f"{core} GPTModel (local layer spec): tensor + pipeline + data parallel, expert "
            "parallel for Qwen3-MoE, HF Llama/Qwen2/Qwen3/Qwen3-MoE checkpoints in and out, "
            "torch AdamW on the shards; gloo + CPU shims on the CPU")


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(
        name="megatron", schema=MegatronSection,
        summary="megatron trainer backend: tensor/pipeline/context parallel sizes, sequence "
                "parallel, distributed optimizer, activation recomputation, HF checkpoints",
    )


@hookimpl
def slime_configure(config: Config) -> None:
    check_config(config)


@hookimpl
def slime_register_trainer_backends() -> list[TrainerBackendRecord]:
    return [TrainerBackendRecord(
        name=BACKEND, factory=make_trainer, critic_factory=make_critic, probe=probe,
        routing_replay=True,
        router_losses=True,
        library="megatron-core",
        summary=_summary(),
        extra={"megatron_core": megatron_core_version()},
    )]
