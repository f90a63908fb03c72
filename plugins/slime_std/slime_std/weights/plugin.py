"""Default plugin ``core_weights``: the ``inprocess``, ``disk``, ``ray`` and ``broadcast``
weight transports (:mod:`slime_std.weights`). Their modules, and ray / torch, are imported
only when a factory or an engine side is built."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Config, WeightTransportRecord, hookimpl


def _inprocess(config: Config, accelerator: Any = None) -> Any:
    from slime_std.weights.inprocess import InProcessTransport

    return InProcessTransport(config, accelerator)


def _disk(config: Config, accelerator: Any = None) -> Any:
    from slime_std.weights.disk import DiskTransport

    return DiskTransport(config, accelerator)


def _disk_engine(config: Config, engine: Any) -> Any:
    from slime_std.weights.disk import DiskEngineSide

    return DiskEngineSide(config, engine)


def _ray(config: Config, accelerator: Any = None) -> Any:
    from slime_std.weights.ray_store import RayObjectTransport

    return RayObjectTransport(config, accelerator)


def _ray_engine(config: Config, engine: Any) -> Any:
    from slime_std.weights.ray_store import RayStoreEngineSide

    return RayStoreEngineSide(config, engine)


def _broadcast(config: Config, accelerator: Any = None) -> Any:
    from slime_std.weights.broadcast import BroadcastTransport

    return BroadcastTransport(config, accelerator)


def _broadcast_engine(config: Config, engine: Any) -> Any:
    from slime_std.weights.broadcast import BroadcastEngineSide

    return BroadcastEngineSide(config, engine)


@hookimpl
def slime_register_weight_transports() -> list[WeightTransportRecord]:
    return [
        WeightTransportRecord(name="inprocess", factory=_inprocess,
                              summary="engines in the trainer's process copy the trainer's tensors"),
        WeightTransportRecord(name="disk", factory=_disk, engine_side=_disk_engine,
                              summary="versioned safetensors directory, read by each engine"),
        WeightTransportRecord(name="ray", factory=_ray, engine_side=_ray_engine,
                              summary="Ray object store: trainer rank 0 puts once, engines "
                                      "fetch (ray executor)"),
        WeightTransportRecord(name="broadcast", factory=_broadcast,
                              engine_side=_broadcast_engine,
                              summary="torch.distributed broadcast from trainer rank 0 to the "
                                      "engines, gloo/nccl (ray executor)"),
    ]
