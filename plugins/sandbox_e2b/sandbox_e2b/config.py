"""The ``[e2b]`` section: where the E2B-compatible service is and what a sandbox gets."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class E2BSection:
    # the control-plane REST API ("" : the SDK's default, https://api.<domain>)
    api_url: str = ""
    # envd of every sandbox ("" : the SDK's per-sandbox https://49983-<id>.<domain>)
    sandbox_url: str = ""
    domain: str = ""  # "" : the SDK's default (E2B_DOMAIN or e2b.app)
    api_key_env: str = "E2B_API_KEY"  # the environment variable that holds the API key
    template: str = "base"  # sandbox template id or alias
    lifetime_s: int = 300  # the service kills a sandbox this long after creation
    request_timeout_s: float = 60.0  # per API / envd request (not the commands' own timeout)
    work_dir: str = "/home/user"  # cwd of commands; relative file paths resolve here
    user: str = "user"  # the sandbox user that runs commands and owns files
    envs: dict[str, str] = field(default_factory=dict)  # environment of every command
    metadata: dict[str, str] = field(default_factory=dict)  # sandbox metadata (labels)
    max_output_bytes: int = 65536  # stdout / stderr kept per command (the rest is cut)
    debug: bool = False  # the SDK's debug mode: envd on localhost:49983, no REST calls

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> E2BSection:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"e2b sandbox: unknown option(s) {unknown}; known: {sorted(known)}")
        return cls(**values)
