"""Can SGLang servers be *launched* here? (The ``sglang`` record's availability probe.)

Cheap and import-free: the package is looked up with ``find_spec`` (importing sglang pulls
torch and CUDA kernels), and CUDA is looked for as the NVIDIA kernel driver's
``/proc/driver/nvidia/version``, unless torch is already imported, in which case torch is
asked. Attaching to running servers (``sglang.urls``) needs neither; see :mod:`.plugin`.
"""

from __future__ import annotations

import importlib.util
import os
import sys

NOT_INSTALLED = "sglang is not installed (pip install 'slime-sglang-rollout[sglang]')"
NO_CUDA = "SGLang needs a CUDA GPU: no NVIDIA driver found"
NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"


def sglang_installed() -> bool:
    try:
        return importlib.util.find_spec("sglang") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def cuda_available() -> bool:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return bool(torch.cuda.is_available())
        except Exception:  # noqa: BLE001 - a broken CUDA setup is "not available"
            return False
    return os.path.exists(NVIDIA_DRIVER_FILE)


def launch_unavailable_reason() -> str | None:
    """None when SGLang servers can be launched on this host, else the one-line reason."""
    if not sglang_installed():
        return NOT_INSTALLED
    if not cuda_available():
        return NO_CUDA
    return None
