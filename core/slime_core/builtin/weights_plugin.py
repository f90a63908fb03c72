"""Built-in plugin ``core_weights``: the ``inprocess`` and ``disk`` weight transports.

``inprocess``: engines in the trainer's process copy the trainer's tensors (no shared storage).
``disk``: each version is written as ``<dir>/v<version>/model.safetensors`` (atomically renamed
when complete), ``slime_after_weights_written`` fires on the writer, then each engine fires
``slime_before_weights_read`` in its own process and loads the file. Old versions beyond the
two newest are removed.
``ray`` and ``broadcast`` (ray executor only; :mod:`slime_core.executors.transports`): the
object store (rank 0 puts each bucket once, engines fetch) and a torch.distributed broadcast
group of trainer rank 0 and the engines (gloo on CPU, nccl on GPU), bucketed by
``weights.bucket_mb``. Their modules import ray / torch only when a factory runs.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from slime_hookspecs import WeightTransportRecord, hookimpl


def _nbytes(weights: dict[str, Any]) -> int:
    return sum(int(t.numel()) * int(t.element_size()) for t in weights.values())


class InProcessTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        t0 = time.perf_counter()
        for e in engines:
            e.update_weights(weights, version)
        return {"bytes": float(_nbytes(weights) * len(engines)), "seconds": time.perf_counter() - t0}


def read_version_dir(version_dir: str, version: int) -> dict[str, Any]:
    """Engine side of the disk transport: fire ``slime_before_weights_read``, then load."""
    from safetensors.torch import load_file

    from slime_core.context import get_manager

    get_manager().hook.slime_before_weights_read(version_dir=version_dir, target_version=version)
    path = os.path.join(version_dir, "model.safetensors")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weight version {version}: {path} does not exist")
    return load_file(path)


class DiskTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config
        base = config.weights.dir or os.path.join(config.run.run_dir or config.run.output_dir,
                                                  "weights")
        self.root = Path(base)
        self.root.mkdir(parents=True, exist_ok=True)

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        from safetensors.torch import save_file

        from slime_core.context import get_manager
        from slime_core.trainer.torch_trainer import _untie

        t0 = time.perf_counter()
        final = self.root / f"v{version:06d}"
        tmp = self.root / f".v{version:06d}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        cpu = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
        save_file(_untie(cpu), str(tmp / "model.safetensors"))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        get_manager().hook.slime_after_weights_written(
            config=self.config, version_dir=str(final), engines=engines)
        for e in engines:
            if hasattr(e, "update_weights_from_disk"):
                e.update_weights_from_disk(str(final), version)
            else:
                e.update_weights(read_version_dir(str(final), version), version)
        for old in sorted(self.root.glob("v*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return {"bytes": float(_nbytes(cpu) * (1 + len(engines))),
                "seconds": time.perf_counter() - t0}


def _ray_transport(config: Any, accelerator: Any = None) -> Any:
    from slime_core.executors.transports import RayObjectTransport

    return RayObjectTransport(config, accelerator)


def _broadcast_transport(config: Any, accelerator: Any = None) -> Any:
    from slime_core.executors.transports import BroadcastTransport

    return BroadcastTransport(config, accelerator)


@hookimpl
def slime_register_weight_transports() -> list[WeightTransportRecord]:
    return [
        WeightTransportRecord(name="inprocess", factory=InProcessTransport,
                              summary="engines in the trainer's process copy the trainer's tensors"),
        WeightTransportRecord(name="disk", factory=DiskTransport,
                              summary="versioned safetensors directory, read by each engine"),
        WeightTransportRecord(name="ray", factory=_ray_transport,
                              summary="Ray object store: trainer rank 0 puts once, engines "
                                      "fetch (ray executor)"),
        WeightTransportRecord(name="broadcast", factory=_broadcast_transport,
                              summary="torch.distributed broadcast from trainer rank 0 to the "
                                      "engines, gloo/nccl (ray executor)"),
    ]
