"""Entry point of ``slime-mcp-tools``: the ``[mcp]`` section and the tool source ``mcp``.

``tools.enabled = ["mcp"]`` puts every tool of the ``[[mcp.servers]]`` into the tool-calling
loop under its own name, with the server's JSON schema. Nothing here imports the SDK.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from slime_hookspecs import Config, ConfigSection, ToolRecord, hookimpl

from mcp_tools.config import McpSection


def probe() -> str | None:
    if importlib.util.find_spec("mcp") is None:
        return "the MCP SDK is not installed (pip install 'mcp>=2.3')"
    return None


def make_source(config: Config) -> Any:
    """Tool-source factory: ``list_tools()`` and ``call(name, arguments, tool_context)``."""
    from mcp_tools.source import McpToolSource

    return McpToolSource(config)


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(name="mcp", schema=McpSection,
                         summary="MCP servers whose tools the 'mcp' tool source lists "
                                 "(stdio per episode or streamable HTTP), connect timeout")


@hookimpl
def slime_register_tools() -> list[ToolRecord]:
    return [ToolRecord(
        name="mcp", factory=make_source, probe=probe,
        library="mcp",
        summary="tool source: every tool of the [[mcp.servers]] (Model Context Protocol), "
                "listed at run start with its JSON schema, a session per episode",
        extra={"tool_source": True},
    )]
