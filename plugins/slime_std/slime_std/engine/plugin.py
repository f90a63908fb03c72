"""Default plugin ``local_engine``: the ``local`` rollout engine record, and the ``auto`` of
its fast-path keys resolved for the run's accelerator (:mod:`slime_std.fast_path`).

The engine (transformers causal LM, own batched decoding loop) lives in
:mod:`slime_std.engine.local_engine`; it is imported by the factory, so listing plugins
never imports torch.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Config, RolloutEngineRecord, hookimpl


def make_local_engine(config: Config, engine_index: int = 0, accelerator: Any = None) -> Any:
    """``factory(config, engine_index, accelerator)`` of the ``local`` record."""
    from slime_std.engine.local_engine import LocalEngine

    return LocalEngine(config, engine_index, accelerator)


@hookimpl
def slime_register_rollout_engines() -> list[RolloutEngineRecord]:
    return [RolloutEngineRecord(
        name="local", factory=make_local_engine, routing_replay=True, lora_adapters=True,
        summary="transformers causal LM in-process; batched KV-cache decoding with exact log-probs",
    )]


@hookimpl
def slime_configure(config: Config) -> None:
    from slime_std.fast_path import configure, resolve_engine

    configure(config, resolve_engine)
    check_verify(config)


def check_verify(config: Config) -> None:
    """``weights.verify`` compares the engine's tensors with the sent ones bit for bit: a local
    engine serving another dtype (``rollout.dtype``) never holds them; refuse before any
    model loads."""
    dtype = str(config.rollout.dtype)
    if (config.weights.verify and config.rollout.engine == "local" and dtype
            and dtype != str(config.model.dtype)):
        raise ValueError(
            f"rollout.dtype = {dtype!r} with weights.verify: the local engine holds the sent "
            f"{config.model.dtype} tensors rounded to {dtype}, never equal to them; set "
            "weights.verify = false or leave rollout.dtype empty")
