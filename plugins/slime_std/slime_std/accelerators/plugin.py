"""Default plugin ``core_accelerators``: the ``cpu`` and ``cuda`` accelerator records
(:mod:`slime_std.accelerators.devices`) and the command ``core gpu-check``
(:mod:`slime_std.accelerators.gpu_check`). Disabled (``--disable-plugin core_accelerators``), a
run has no accelerator unless another plugin registers one, and fails naming
``run.accelerator``.

Probes never import torch (``core plugins`` must stay torch-free); device-specific calls
live on the objects the factories build.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from slime_hookspecs import AcceleratorRecord, hookimpl

from slime_std.accelerators.devices import CPUAccelerator, TorchAccelerator


def _cuda_probe() -> str | None:
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if not torch.cuda.is_available():
            return "torch.cuda.is_available() is False"
        return None
    if not os.path.exists("/proc/driver/nvidia/version"):
        return "no NVIDIA driver found (/proc/driver/nvidia/version is missing)"
    return None


@hookimpl
def slime_register_accelerators() -> list[AcceleratorRecord]:
    return [
        AcceleratorRecord(
            name="cpu", factory=CPUAccelerator, summary="host CPU (gloo)",
            device_type="cpu", dist_backend="gloo", ray_resource="CPU", priority=0,
        ),
        AcceleratorRecord(
            name="cuda", factory=lambda: TorchAccelerator("cuda", fused_optimizer=True),
            summary="NVIDIA GPUs through torch.cuda (nccl)", probe=_cuda_probe,
            device_type="cuda", dist_backend="nccl", ray_resource="GPU",
            visible_devices_env="CUDA_VISIBLE_DEVICES", priority=10, graph_capture=True,
        ),
    ]


@hookimpl
def slime_register_commands(cli: Any) -> None:
    from slime_std.accelerators.gpu_check import gpu_check_command

    cli.add_command(gpu_check_command)
