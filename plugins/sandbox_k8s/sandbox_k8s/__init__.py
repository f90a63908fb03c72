"""slime sandbox record ``k8s``: tool code in one Kubernetes Pod per sandbox.

Import-light: ``kubernetes`` is imported only when a sandbox or :func:`sweep` is used.
``K8sSandbox``, ``K8sSandboxOptions``, ``SandboxStartError`` and ``sweep`` are loaded lazily.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "K8sSandbox": "sandbox_k8s.sandbox",
    "SandboxStartError": "sandbox_k8s.sandbox",
    "K8sSandboxOptions": "sandbox_k8s.manifests",
    "sweep": "sandbox_k8s.cleanup",
}

__all__ = ["K8sSandbox", "K8sSandboxOptions", "SandboxStartError", "sweep", "__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox_k8s' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
