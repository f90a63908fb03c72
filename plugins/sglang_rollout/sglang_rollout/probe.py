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


def sglang_installed_for(python: str, env: dict[str, str]) -> str | None:
    """Whether ``python`` (with ``env`` added to this environment) finds the ``sglang``
    package: ``None`` when it does, else the reason. The look-up runs in that interpreter
    (``find_spec``, no import), as launched servers will; a missing interpreter is named."""
    import subprocess

    exe = python or sys.executable
    child_env = {**os.environ, **env}
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    try:
        done = subprocess.run([exe, "-c", code], env=child_env, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sglang.python {exe!r} could not be run: {exc}"
    if done.returncode != 0:
        where = f" (with sglang.env {sorted(env)})" if env else ""
        return f"sglang is not installed for {exe}{where}; {NOT_INSTALLED}"
    return None


def launch_unavailable_reason(python: str = "", env: dict[str, str] | None = None) -> str | None:
    """None when SGLang servers can be launched on this host, else the one-line reason.

    With ``sglang.python`` or ``sglang.env`` set, the package is looked up by that interpreter
    in that environment (SGLang pins its own torch and transformers and often lives apart from
    the trainer); otherwise in this process.
    """
    if python or env:
        why = sglang_installed_for(python, env or {})
        if why is not None:
            return why
    elif not sglang_installed():
        return NOT_INSTALLED
    if not cuda_available():
        return NO_CUDA
    return None
