"""Sandboxes of ``core_sandbox``: ``local`` runs tool code in a bubblewrap jail on this machine."""

from __future__ import annotations

from typing import Any

from slime_hookspecs.records import SandboxRecord

from slime_agent.sandbox.local import MISSING_BWRAP, LocalSandbox, SandboxError
from slime_agent.sandbox.probe import probe_local_sandbox, total_limits_report

__all__ = [
    "MISSING_BWRAP",
    "LocalSandbox",
    "SandboxError",
    "make_local_sandbox",
    "probe_local_sandbox",
    "sandbox_records",
    "total_limits_report",
]


def make_local_sandbox(config: Any = None, **options: Any) -> LocalSandbox:
    """The ``local`` record's factory: ``LocalSandbox(**options)``; ``config`` is unused."""
    return LocalSandbox(**options)


def sandbox_records() -> list[SandboxRecord]:
    """Records for ``slime_register_sandboxes``."""
    return [
        SandboxRecord(
            name="local",
            factory=make_local_sandbox,
            summary="bubblewrap jail on this machine: no network, read-only system, "
            "private /work, CPU/memory/process/time limits",
            probe=probe_local_sandbox,
            extra={"limits_report": total_limits_report},  # notes of `core plugins check`
        )
    ]
