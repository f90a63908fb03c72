"""The ``cpu`` and ``cuda`` accelerators (registered by ``core_accelerators``,
:mod:`slime_std.accelerators.plugin`).

Probes never import torch (``core plugins`` must stay torch-free); device-specific calls
live on the objects the factories build.
"""

from __future__ import annotations

from typing import Any


class TorchAccelerator:
    """Accelerator calls through ``torch.<device_type>`` (``torch.cuda`` for CUDA).
    ``fused_optimizer``: torch's fused AdamW kernel runs on this device type."""

    def __init__(self, device_type: str, fused_optimizer: bool = False) -> None:
        self.device_type = device_type
        self.fused_optimizer = fused_optimizer

    def _mod(self) -> Any:
        import torch

        return getattr(torch, self.device_type)

    def device_count(self) -> int:
        return int(self._mod().device_count())

    def device(self, index: int = 0) -> Any:
        import torch

        return torch.device(self.device_type, index)

    def memory_stats(self) -> dict[str, float]:
        mod = self._mod()
        return {
            "allocated_gb": mod.memory_allocated() / 2**30,
            "reserved_gb": mod.memory_reserved() / 2**30,
            "max_allocated_gb": mod.max_memory_allocated() / 2**30,
        }

    def empty_cache(self) -> None:
        self._mod().empty_cache()

    def get_rng_state(self) -> Any:
        return self._mod().get_rng_state_all()

    def set_rng_state(self, state: Any) -> None:
        self._mod().set_rng_state_all(state)


class CPUAccelerator:
    device_type = "cpu"
    # torch's AdamW on the CPU otherwise loops over the tensors in Python: SmolLM2-135M's
    # update took 0.50-0.65 s on 2 cores, 0.08 s fused (bench/README.md)
    fused_optimizer = True

    def device_count(self) -> int:
        return 1

    def device(self, index: int = 0) -> Any:
        import torch

        return torch.device("cpu")

    def memory_stats(self) -> dict[str, float]:
        rss_kb = 0.0
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        rss_kb = float(line.split()[1])
        except OSError:
            pass
        return {"rss_gb": rss_kb / 2**20}

    def empty_cache(self) -> None:
        return None

    def get_rng_state(self) -> Any:
        return None  # the CPU generator is saved by the trainer with torch.get_rng_state()

    def set_rng_state(self, state: Any) -> None:
        return None
