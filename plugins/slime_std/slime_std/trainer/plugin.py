"""Default plugin ``torch_trainer``: the ``torch`` trainer backend record (torch imported lazily),
and the ``auto`` of its fast-path keys resolved for the run's accelerator
(:mod:`slime_std.fast_path`)."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Config, TrainerBackendRecord, hookimpl


def _make(config: Config, rank: int = 0, world_size: int = 1, accelerator: Any = None) -> Any:
    from slime_std.trainer.torch_trainer import TorchTrainer

    return TorchTrainer(config, rank, world_size, accelerator)


def _make_critic(config: Config, model: Any, spec: Any) -> Any:
    from slime_std.trainer.critic import make_critic

    return make_critic(config, model, spec)


@hookimpl
def slime_register_trainer_backends() -> list[TrainerBackendRecord]:
    return [TrainerBackendRecord(
        name="torch", factory=_make, critic_factory=_make_critic, routing_replay=True,
        router_losses=True,
        summary="transformers AutoModelForCausalLM + AdamW; fp32 on CPU, bf16 on GPU",
    )]


@hookimpl
def slime_configure(config: Config) -> None:
    from slime_std.fast_path import configure, resolve_trainer

    configure(config, resolve_trainer)
