"""The ``[mcp]`` section: the servers whose tools the ``mcp`` tool source lists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SERVER_KEYS = {"name", "transport", "command", "args", "env", "cwd", "url", "tools", "prefix"}


@dataclass
class McpSection:
    # one table per server: name, transport ("stdio": command, args, env, cwd; a process per
    # episode | "http": url of a streamable-HTTP endpoint, a session per episode), tools (the
    # tool names to expose, [] = all), prefix (put before each tool name, "" = none)
    servers: list[dict[str, Any]] = field(default_factory=list)
    connect_timeout: float = 60.0  # seconds to start a server / open a session and initialize


@dataclass
class ServerSpec:
    name: str
    transport: str = "stdio"
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str = ""
    tools: list[str] = field(default_factory=list)
    prefix: str = ""


def server_specs(section: Any) -> list[ServerSpec]:
    """The validated ``mcp.servers`` tables; errors name the table and the key."""
    specs: list[ServerSpec] = []
    for i, table in enumerate(section.servers):
        where = f"mcp.servers[{i}]"
        unknown = set(table) - SERVER_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; valid: {sorted(SERVER_KEYS)}")
        spec = ServerSpec(**{"name": f"server{i}", **table})
        if spec.transport == "stdio" and not spec.command:
            raise ValueError(f"{where} ({spec.name}): transport 'stdio' needs a command")
        if spec.transport == "http" and not spec.url.startswith(("http://", "https://")):
            raise ValueError(f"{where} ({spec.name}): transport 'http' needs an http(s) url, "
                             f"got {spec.url!r}")
        if spec.transport not in ("stdio", "http"):
            raise ValueError(f"{where} ({spec.name}): transport must be 'stdio' or 'http', "
                             f"got {spec.transport!r}")
        if any(s.name == spec.name for s in specs):
            raise ValueError(f"{where}: server name {spec.name!r} is used twice")
        specs.append(spec)
    if not specs:
        raise ValueError("tools.enabled names 'mcp' but mcp.servers is empty: add a "
                         "[[mcp.servers]] table (name, transport, command/args or url)")
    return specs
