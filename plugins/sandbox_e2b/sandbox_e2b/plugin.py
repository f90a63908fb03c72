"""Entry point of ``slime-sandbox-e2b``: the ``[e2b]`` section and the sandbox record ``e2b``.

Kept light: the ``e2b`` SDK is imported when a sandbox starts; the probe only looks for the
package (the API key is checked when a sandbox starts).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

from slime_hookspecs import Config, ConfigSection, SandboxRecord, hookimpl

from sandbox_e2b.config import E2BSection

NOT_INSTALLED = "the e2b SDK is not installed (pip install slime-sandbox-e2b)"


def probe() -> str | None:
    """None when the SDK is importable. The API key is checked when a sandbox starts: its
    variable is named in the run's config (``e2b.api_key_env``), which a probe does not see."""
    if importlib.util.find_spec("e2b") is None:
        return NOT_INSTALLED
    return None


def make_sandbox(config: Config | None = None, **options: Any) -> Any:
    """``factory(config, **options)``: a not-yet-started :class:`~sandbox_e2b.sandbox.E2BSandbox`
    from ``[e2b]``, with ``options`` (``tools.sandbox_options``) overriding its keys."""
    from sandbox_e2b.sandbox import E2BSandbox

    section = getattr(config, "e2b", None) if config is not None else None
    values = (dataclasses.asdict(section)
              if dataclasses.is_dataclass(section) and not isinstance(section, type) else {})
    return E2BSandbox(E2BSection.from_mapping({**values, **options}))


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(name="e2b", schema=E2BSection,
                         summary="E2B sandboxes: API / envd URLs, domain, API key variable, "
                                 "template, lifetime, work dir, output cap")


@hookimpl
def slime_register_sandboxes() -> list[SandboxRecord]:
    return [SandboxRecord(
        name="e2b", factory=make_sandbox, probe=probe,
        library="e2b",
        summary="one E2B sandbox per episode through the e2b SDK ([e2b]: api_url, "
                "sandbox_url, domain, api_key_env)",
    )]
