"""Built-in plugin ``core_weights``: the ``inprocess``, ``disk``, ``ray`` and ``broadcast``
weight transports (:mod:`slime_core.weights`). Their modules, and ray / torch, are imported
only when a factory runs."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Config, WeightTransportRecord, hookimpl


def _inprocess(config: Config, accelerator: Any = None) -> Any:
    from slime_core.weights.inprocess import InProcessTransport

    return InProcessTransport(config, accelerator)


def _disk(config: Config, accelerator: Any = None) -> Any:
    from slime_core.weights.disk import DiskTransport

    return DiskTransport(config, accelerator)


def _ray(config: Config, accelerator: Any = None) -> Any:
    from slime_core.weights.ray_store import RayObjectTransport

    return RayObjectTransport(config, accelerator)


def _broadcast(config: Config, accelerator: Any = None) -> Any:
    from slime_core.weights.broadcast import BroadcastTransport

    return BroadcastTransport(config, accelerator)


@hookimpl
def slime_register_weight_transports() -> list[WeightTransportRecord]:
    return [
        WeightTransportRecord(name="inprocess", factory=_inprocess,
                              summary="engines in the trainer's process copy the trainer's tensors"),
        WeightTransportRecord(name="disk", factory=_disk,
                              summary="versioned safetensors directory, read by each engine"),
        WeightTransportRecord(name="ray", factory=_ray,
                              summary="Ray object store: trainer rank 0 puts once, engines "
                                      "fetch (ray executor)"),
        WeightTransportRecord(name="broadcast", factory=_broadcast,
                              summary="torch.distributed broadcast from trainer rank 0 to the "
                                      "engines, gloo/nccl (ray executor)"),
    ]
