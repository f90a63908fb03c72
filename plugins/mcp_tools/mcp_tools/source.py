"""The ``mcp`` tool source: list the servers' tools once, call them in per-episode sessions.

``list_tools()`` (when the run's tool executor is built) opens one session per server, lists
its tools (name, description, ``inputSchema`` as the JSON schema of the arguments), and
closes it. ``call(name, arguments, tool_context)`` opens the episode's session to the tool's
server on first use (a stdio server is a fresh process per episode, so its state is the
episode's; an HTTP server gets a new MCP session), keeps it in ``tool_context.state`` and
closes it at the end of the episode (``tool_context.on_close``). The session is opened in
``prepare``, which the core's tool executor awaits before the call and outside
``tools.timeout``, so that limit is the tool's own work; ``mcp.connect_timeout`` bounds the
opening (many episodes opening HTTP sessions on one server at once can take seconds).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp_tools.config import ServerSpec, server_specs
from mcp_tools.connection import Connection


class McpToolSource:
    def __init__(self, config: Any) -> None:
        section = getattr(config, "mcp", None)
        if section is None:
            raise ValueError("tool source 'mcp' needs the [mcp] section (plugin mcp_tools)")
        self.servers = server_specs(section)
        self.connect_timeout = float(section.connect_timeout)
        self.routes: dict[str, tuple[ServerSpec, str]] = {}  # exposed name -> (server, tool)

    async def list_tools(self) -> list[dict[str, Any]]:
        listed = await asyncio.gather(*(self._list(s) for s in self.servers))
        out: list[dict[str, Any]] = []
        for spec, tools in zip(self.servers, listed, strict=True):
            by_name = {t.name: t for t in tools}
            missing = [n for n in spec.tools if n not in by_name]
            if missing:
                raise ValueError(f"mcp.servers {spec.name!r}: tools {missing} are not offered; "
                                 f"the server lists {sorted(by_name)}")
            for tool in tools:
                if spec.tools and tool.name not in spec.tools:
                    continue
                exposed = spec.prefix + tool.name
                if exposed in self.routes:
                    raise ValueError(f"MCP tool {exposed!r} is offered by servers "
                                     f"{self.routes[exposed][0].name!r} and {spec.name!r}; set a "
                                     "prefix on one of them")
                self.routes[exposed] = (spec, tool.name)
                out.append({"name": exposed, "description": tool.description or "",
                            "parameters": _schema(tool)})
        return out

    async def _list(self, spec: ServerSpec) -> list[Any]:
        conn = await Connection(spec, self.connect_timeout).open()
        try:
            return await conn.list_tools()
        finally:
            await conn.close()

    async def prepare(self, name: str, tool_context: Any) -> None:
        """Open (or wait for) the episode's session to ``name``'s server."""
        await self._episode_connection(self.routes[name][0], tool_context)

    async def call(self, name: str, arguments: dict[str, Any], tool_context: Any) -> str:
        spec, tool = self.routes[name]
        conn = await self._episode_connection(spec, tool_context)
        return await conn.call_tool(tool, arguments)

    async def _episode_connection(self, spec: ServerSpec, ctx: Any) -> Connection:
        key = f"mcp:{spec.name}"
        pending = ctx.state.get(key)
        if pending is None:  # one opener per episode and server, even for concurrent calls
            pending = ctx.state[key] = asyncio.ensure_future(
                Connection(spec, self.connect_timeout).open())

            async def close() -> None:
                try:
                    conn = await pending
                except Exception:  # noqa: BLE001 - it never opened: nothing to close
                    return
                await conn.close()

            ctx.on_close(close)
        return await asyncio.shield(pending)


def _schema(tool: Any) -> dict[str, Any]:
    schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {}
    schema = dict(schema)
    schema.setdefault("type", "object")
    return schema
