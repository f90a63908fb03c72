"""``E2BSandbox``: the ``slime_hookspecs.Sandbox`` protocol on one E2B sandbox (``e2b`` SDK).

Lifecycle: ``__aenter__`` creates the sandbox (``AsyncSandbox.create``: ``POST /v2/sandboxes``
on the REST API), ``close`` kills it (``DELETE /sandboxes/{id}``). Commands and files go to
the sandbox's envd: ``exec`` is ``commands.run`` (the Connect stream
``process.Process/Start``; the SDK wraps the command in ``/bin/bash -l -c``), ``write_file`` /
``read_file`` are ``files.write`` / ``files.read`` (``POST`` / ``GET /files``).

Where to: ``[e2b] api_url`` and ``sandbox_url`` send both planes to any E2B-compatible host
(the SDK's own ``api_url`` / ``sandbox_url`` options, which it marks internal and deprecated),
``domain`` keeps the SDK's per-sandbox addressing (``https://49983-<id>.<domain>``); the key
is read from the environment variable ``api_key_env`` (never from the config file).
"""

from __future__ import annotations

import os
import shlex
import time
from typing import Any

from slime_hookspecs import ExecResult

from sandbox_e2b.config import E2BSection


class E2BSandboxError(RuntimeError):
    """The sandbox could not be created or used (the message names the endpoint)."""


class _Capped:
    """Output kept up to ``limit`` bytes of UTF-8; the rest is counted, not kept."""

    def __init__(self, limit: int) -> None:
        self.parts: list[bytes] = []
        self.limit, self.size, self.truncated = limit, 0, False

    def add(self, text: str) -> None:
        room = self.limit - self.size
        data = text.encode()
        if len(data) > room:
            self.truncated = True
            data = data[:max(room, 0)]
        if data:
            self.parts.append(data)
            self.size += len(data)

    def text(self) -> str:
        return b"".join(self.parts).decode(errors="replace")


class E2BSandbox:
    """One E2B sandbox; ``async with E2BSandbox(E2BSection(...)) as box: await box.exec(...)``."""

    def __init__(self, options: E2BSection | None = None) -> None:
        self.options = options or E2BSection()
        self.sandbox: Any = None  # the SDK's AsyncSandbox once started
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------
    def connection_options(self) -> dict[str, Any]:
        """Keyword arguments of ``AsyncSandbox.create`` that say where and with which key."""
        o = self.options
        key = os.environ.get(o.api_key_env, "")
        if not key and not o.debug:
            raise E2BSandboxError(f"e2b sandbox: the API key variable {o.api_key_env} is not set "
                                  "(e2b.api_key_env names it)")
        opts: dict[str, Any] = {"api_key": key or None, "request_timeout": o.request_timeout_s}
        for name in ("api_url", "sandbox_url", "domain"):
            if getattr(o, name):
                opts[name] = getattr(o, name)
        if o.debug:
            opts["debug"] = True
        return opts

    async def start(self) -> E2BSandbox:
        from e2b import AsyncSandbox

        if self._closed:
            raise E2BSandboxError("the sandbox is closed")
        if self.sandbox is not None:
            return self
        o = self.options
        where = o.api_url or o.domain or "the SDK's default endpoint"
        try:
            self.sandbox = await AsyncSandbox.create(
                template=o.template, timeout=o.lifetime_s, envs=dict(o.envs) or None,
                metadata=dict(o.metadata) or None, **self.connection_options())
        except E2BSandboxError:
            raise
        except Exception as exc:  # noqa: BLE001 - one message that says where it failed
            raise E2BSandboxError(f"e2b sandbox: creating a {o.template!r} sandbox at {where} "
                                  f"failed: {type(exc).__name__}: {exc}") from exc
        return self

    async def close(self) -> None:
        """Kill the sandbox (idempotent; a sandbox already gone is not an error)."""
        self._closed = True
        box, self.sandbox = self.sandbox, None
        if box is not None:
            await box.kill()

    async def __aenter__(self) -> E2BSandbox:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def sandbox_id(self) -> str | None:
        return getattr(self.sandbox, "sandbox_id", None)

    # -- the protocol ----------------------------------------------------------------------------
    def _live(self) -> Any:
        if self._closed:
            raise E2BSandboxError("the sandbox is closed")
        if self.sandbox is None:
            raise E2BSandboxError("the sandbox is not started (use `async with` or start())")
        return self.sandbox

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.options.work_dir.rstrip('/')}/{path}"

    async def exec(self, cmd: str | list[str], timeout: float = 30.0,
                   env: dict[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` (a shell string, or an argv list that is quoted into one) in the work
        directory. A non-zero exit is returned, not raised; past ``timeout`` seconds the
        command is stopped and ``timed_out`` is set, with the output read until then."""
        from e2b import CommandExitException, TimeoutException

        box = self._live()
        line = cmd if isinstance(cmd, str) else shlex.join(cmd)
        out, err = _Capped(self.options.max_output_bytes), _Capped(self.options.max_output_bytes)
        started = time.monotonic()
        code, timed_out = 0, False
        try:
            res = await box.commands.run(
                line, envs=dict(env) if env else None, cwd=self.options.work_dir,
                user=self.options.user, timeout=timeout, on_stdout=out.add, on_stderr=err.add)
            code = res.exit_code
        except CommandExitException as exc:
            code = exc.exit_code
        except TimeoutException:
            timed_out, code = True, 137  # as the local sandbox reports a kill after its timeout
        return ExecResult(exit_code=code, stdout=out.text(), stderr=err.text(),
                          timed_out=timed_out, truncated=out.truncated or err.truncated,
                          duration_s=time.monotonic() - started)

    async def write_file(self, path: str, data: str | bytes) -> None:
        await self._live().files.write(self._path(path), data, user=self.options.user)

    async def read_file(self, path: str) -> bytes:
        return bytes(await self._live().files.read(self._path(path), format="bytes",
                                                   user=self.options.user))
