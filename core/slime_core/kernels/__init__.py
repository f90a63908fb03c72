"""Triton kernels for the GPU hot paths: the log-prob head's statistics here, and the choice
of a kernel for every path (the local engine's decode kernels live in ``slime_std.engine.kernels``
and ask :func:`choose` through ``slime_core.api.choose_kernel``).

Each kernel has a torch reference it must match (the CUDA tests compare them) and is used only
where ``available(device)`` holds: a CUDA device and an importable ``triton``. Nothing here
imports triton at module import time, so the CPU install (no triton) imports this package.
"""

from __future__ import annotations

import functools
import os

import torch


@functools.cache
def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return False
    return True


def interpreted() -> bool:
    """Triton's interpreter (``TRITON_INTERPRET=1``) runs kernels on CPU tensors: how the
    kernels are checked on a machine without a GPU."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def available(device: torch.device | str) -> bool:
    """Whether the Triton kernels can run on ``device``."""
    if not _triton_importable():
        return False
    kind = torch.device(device).type
    return kind == "cuda" or (interpreted() and kind == "cpu")


@functools.cache
def _pdl_capable(index: int) -> bool:
    try:
        from triton.language.extra import cuda as tl_cuda
    except Exception:  # noqa: BLE001 - an older triton: no device-side launch control
        return False
    return (hasattr(tl_cuda, "gdc_wait") and hasattr(tl_cuda, "gdc_launch_dependents")
            and torch.cuda.get_device_capability(index)[0] >= 9)


def pdl_supported(device: torch.device | str) -> bool:
    """Whether a kernel here may launch with programmatic dependent launch on ``device``: a
    CUDA device of compute capability >= 9 (Hopper on) and a triton with ``gdc_wait``. Such
    a launch may start while the kernel before it finishes; the kernel waits
    (``gdc_wait``) before its first load, so what it computes is unchanged."""
    device = torch.device(device)
    return (device.type == "cuda" and _triton_importable() and not interpreted()
            and _pdl_capable(device.index if device.index is not None
                             else torch.cuda.current_device()))


def choose(setting: str, device: torch.device | str, key: str) -> bool:
    """Resolve a kernel setting (``"auto"``, ``"triton"`` or the torch name) for tensors on
    ``device``: True when the Triton kernel is to be used. ``"triton"`` where it cannot run is
    an error naming ``key`` (the config key that asked for it)."""
    if setting == "auto":
        return available(device)
    if setting == "triton":
        if not available(device):
            raise RuntimeError(
                f"{key} = \"triton\" needs a CUDA device and an importable triton "
                f"(tensors on {device}, triton importable: {_triton_importable()})")
        return True
    return False
