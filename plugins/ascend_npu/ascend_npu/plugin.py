"""Entry point of ``ascend_npu``: registers the ``npu`` accelerator record.

Never imports torch or torch_npu at import time (``core plugins`` stays torch-free, and on a
host without CANN importing torch_npu fails). The probe explains why the record is
unavailable; everything device-specific goes through ``torch.npu`` once torch_npu is loaded.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, cast

from slime_hookspecs import AcceleratorRecord, hookimpl

#: environment Ray needs so it does not overwrite ASCEND_RT_VISIBLE_DEVICES itself
RAY_ENV = {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}

#: settings rollout engines need on Ascend (read by engine plugins that support NPU)
ENGINE_SETTINGS: dict[str, dict[str, Any]] = {
    # vllm-ascend is a vLLM platform plugin: installing it makes vLLM pick the NPU platform
    "vllm": {"package": "vllm-ascend", "env": {"VLLM_TARGET_DEVICE": "npu"}},
    # SGLang's NPU build: device and attention backend flags of sglang.launch_server
    "sglang": {"package": "sglang[srt_npu]", "server_args": {"device": "npu",
                                                             "attention_backend": "ascend"}},
}

CANN_HINTS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
CANN_DIRS = ("/usr/local/Ascend/ascend-toolkit", "/usr/local/Ascend")


def probe() -> str | None:
    """``None`` when torch_npu and the CANN runtime are present, else the reason."""
    if importlib.util.find_spec("torch_npu") is None:
        return "torch_npu is not installed (pip install 'slime-ascend-npu[npu]' on an Ascend host)"
    if not any(os.environ.get(v) for v in CANN_HINTS) and not any(os.path.isdir(d) for d in CANN_DIRS):
        return "Ascend CANN runtime not found (set ASCEND_HOME_PATH or install CANN)"
    return None


class NPUAccelerator:
    """Device calls through ``torch.npu`` (available once ``torch_npu`` is imported)."""

    device_type = "npu"

    def __init__(self) -> None:
        reason = probe()
        if reason:
            raise RuntimeError(f"accelerator 'npu' is unavailable: {reason}")
        import torch
        import torch_npu  # noqa: F401 - registers the npu device with torch

        self._torch = torch

    @property
    def _npu(self) -> Any:
        """``torch.npu`` (torch_npu registers it; torch's annotations do not know it)."""
        return cast(Any, self._torch).npu

    def device_count(self) -> int:
        return int(self._npu.device_count())

    def device(self, index: int = 0) -> Any:
        return self._torch.device("npu", index)

    def memory_stats(self) -> dict[str, float]:
        npu = self._npu
        return {"allocated_gb": npu.memory_allocated() / 2**30,
                "reserved_gb": npu.memory_reserved() / 2**30,
                "max_allocated_gb": npu.max_memory_allocated() / 2**30}

    def empty_cache(self) -> None:
        self._npu.empty_cache()

    def get_rng_state(self) -> Any:
        return self._npu.get_rng_state_all()

    def set_rng_state(self, state: Any) -> None:
        self._npu.set_rng_state_all(state)


@hookimpl
def slime_register_accelerators() -> list[AcceleratorRecord]:
    return [AcceleratorRecord(
        name="npu", factory=NPUAccelerator, probe=probe,
        library="torch-npu",
        summary="Huawei Ascend NPUs through torch_npu (hccl)",
        device_type="npu", dist_backend="hccl", ray_resource="NPU",
        visible_devices_env="ASCEND_RT_VISIBLE_DEVICES", priority=20,
        extra={"ray_env": dict(RAY_ENV), "engine_settings": ENGINE_SETTINGS},
    )]
