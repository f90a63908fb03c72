"""Built-in plugin ``core_sandbox``: the ``local`` bubblewrap sandbox record."""

from __future__ import annotations

from slime_hookspecs import SandboxRecord, hookimpl


@hookimpl
def slime_register_sandboxes() -> list[SandboxRecord]:
    from slime_agent.sandbox import sandbox_records

    return sandbox_records()
