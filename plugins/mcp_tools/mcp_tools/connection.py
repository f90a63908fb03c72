"""One MCP client session, owned by a task of its own.

The SDK's transports are anyio task groups: they must be entered and left by the same task.
A tool call runs in a task the tool executor creates (``asyncio.wait_for``), and the episode
closes its tools from another, so the session lives in :meth:`Connection._serve`, a task that
opens the transport, initializes, answers requests from a queue and closes everything when
:meth:`close` asks it to.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

from mcp_tools.config import ServerSpec


class McpError(RuntimeError):
    """The server answered with an error (``isError``) or the connection failed."""


class Connection:
    def __init__(self, spec: ServerSpec, connect_timeout: float = 60.0) -> None:
        self.spec = spec
        self.connect_timeout = connect_timeout
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        self._ready: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> Connection:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._serve(), name=f"mcp:{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.connect_timeout)
        except asyncio.TimeoutError:
            await self.close()
            raise McpError(f"MCP server {self.spec.name!r} did not initialize within "
                           f"{self.connect_timeout:g} s") from None
        return self

    def _transport(self) -> Any:
        spec = self.spec
        if spec.transport == "http":
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(spec.url)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        env = None if spec.env is None else {**os.environ, **spec.env}
        command = sys.executable if spec.command == "python" else spec.command
        params = StdioServerParameters(command=command, args=list(spec.args), env=env,
                                       cwd=spec.cwd)
        return stdio_client(params, errlog=_devnull())

    async def _serve(self) -> None:
        from mcp import ClientSession

        assert self._ready is not None
        try:
            async with self._transport() as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    self._ready.set_result(None)
                    while True:
                        item = await self._requests.get()
                        if item is None:
                            return
                        method, args, fut = item
                        try:
                            res = await getattr(session, method)(*args)
                        except Exception as exc:  # noqa: BLE001 - handed to the caller
                            if not fut.done():
                                fut.set_exception(exc)
                        else:
                            if not fut.done():
                                fut.set_result(res)
        except Exception as exc:  # noqa: BLE001 - a failed start is the opener's error
            err = McpError(f"MCP server {self.spec.name!r}: {type(exc).__name__}: {exc}")
            if not self._ready.done():
                self._ready.set_exception(err)
            self._fail_pending(err)

    def _fail_pending(self, err: Exception) -> None:
        while not self._requests.empty():
            item = self._requests.get_nowait()
            if item is not None and not item[2].done():
                item[2].set_exception(err)

    async def request(self, method: str, *args: Any) -> Any:
        if self._task is None or self._task.done():
            raise McpError(f"MCP server {self.spec.name!r}: the connection is closed")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._requests.put((method, args, fut))
        return await fut

    async def list_tools(self) -> list[Any]:
        res = await self.request("list_tools")
        return list(res.tools)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        res = await self.request("call_tool", name, arguments)
        text = "\n".join(getattr(c, "text", "") or f"[{getattr(c, 'type', '?')} content]"
                         for c in (res.content or []))
        if not text and getattr(res, "structured_content", None) is not None:
            import json

            text = json.dumps(res.structured_content)
        if getattr(res, "is_error", False):
            raise McpError(text or f"{name} failed")
        return text

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        await self._requests.put(None)
        try:
            await asyncio.wait_for(task, 10.0)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


_NULL: list[Any] = []


def _devnull() -> Any:
    """Where stdio servers' stderr goes: their logs would flood the run's output."""
    if not _NULL:
        _NULL.append(open(os.devnull, "w"))  # noqa: SIM115 - kept for the process's life
    return _NULL[0]
