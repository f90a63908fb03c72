"""Entry-point module of ``slime-sandbox-k8s``: registers the sandbox record ``k8s``.

Kept light: nothing here imports ``kubernetes``; the factory imports the sandbox module
when a sandbox is built, the probe only looks for the package and a configuration.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

from slime_hookspecs import Config
from slime_hookspecs.markers import hookimpl
from slime_hookspecs.records import SandboxRecord

NOT_INSTALLED = "kubernetes client is not installed (pip install slime-sandbox-k8s)"
NOT_CONFIGURED = "no Kubernetes configuration found (KUBECONFIG / in-cluster)"
CONFIG_SECTION = "sandbox_k8s"


def probe() -> str | None:
    """None when the client is importable and a kubeconfig or in-cluster account exists."""
    if importlib.util.find_spec("kubernetes") is None:
        return NOT_INSTALLED
    from sandbox_k8s.client import config_source

    if config_source() is None:
        return NOT_CONFIGURED
    return None


def make_sandbox(config: Config | None = None, **options: Any) -> Any:
    """``factory(config, **options)``: a not-yet-started ``K8sSandbox``.

    Options come from the config's ``[sandbox_k8s]`` section when the config has one,
    overridden by ``options``; ``api_client=`` may pass a ready ``kubernetes`` ApiClient.
    """
    from sandbox_k8s.sandbox import K8sSandbox

    api_client = options.pop("api_client", None)
    merged = {**_section_values(config), **options}
    return K8sSandbox(api_client=api_client, **merged)


def _section_values(config: Config | None) -> dict[str, Any]:
    if config is None:
        return {}
    try:
        section = getattr(config, CONFIG_SECTION)
    except AttributeError:
        return {}
    if isinstance(section, dict):
        return dict(section)
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return dataclasses.asdict(section)
    return {}


@hookimpl
def slime_register_sandboxes() -> list[SandboxRecord]:
    return [
        SandboxRecord(
            name="k8s",
            factory=make_sandbox,
            summary="one Kubernetes Pod per sandbox (non-root, limits, deadline, no egress)",
            probe=probe,
            library="kubernetes",
        )
    ]
