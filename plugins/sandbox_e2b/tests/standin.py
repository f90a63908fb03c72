"""A local stand-in for E2B on 127.0.0.1: the control-plane REST API and envd, as the ``e2b``
SDK calls them (read from its source, e2b 2.63).

* REST (``X-API-KEY``): ``POST /v2/sandboxes`` (201, the sandbox's id, envd version and
  access token), ``DELETE /sandboxes/{id}`` (204, 404 when unknown);
* envd (``E2b-Sandbox-Id`` picks the sandbox, ``X-Access-Token`` must be its token):
  ``GET /health``; ``POST /process.Process/Start``, a Connect server stream in JSON
  (enveloped messages: start with the pid, stdout/stderr data in base64, end with the exit
  code, then the end-of-stream frame); ``POST /process.Process/SendSignal`` (unary);
  ``GET /files?path=`` (the bytes) and ``POST /files?path=`` (multipart ``file``).

Not a VM: each sandbox is a temporary directory standing for its filesystem root, and a
command runs as a host process with the sandbox's paths mapped into it (``cwd``, ``HOME``).
A command past its ``Connect-Timeout-Ms`` or whose client went away is killed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import shutil
import signal
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

ENVD_VERSION = "0.5.7"


@dataclass
class Box:
    id: str
    token: str
    root: Path
    envs: dict[str, str]
    procs: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)

    def host_path(self, path: str) -> Path:
        p = Path("/home/user", path) if not path.startswith("/") else Path(path)
        resolved = (self.root / p.relative_to("/")).resolve()
        if not resolved.is_relative_to(self.root.resolve()):
            raise web.HTTPForbidden(text="path outside the sandbox")
        return resolved


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


class StandIn:
    """``StandIn(api_key).start()`` serves on 127.0.0.1 (``.url``); ``.calls`` logs requests."""

    def __init__(self, api_key: str = "e2b_test_key") -> None:
        self.api_key = api_key
        self.boxes: dict[str, Box] = {}
        self.calls: list[tuple[str, str]] = []
        self.created: list[dict[str, Any]] = []
        self.killed: list[str] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- lifetime ------------------------------------------------------------------------------
    def start(self) -> StandIn:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="e2b-standin", daemon=True)
        self._thread.start()
        ready.wait(30)
        return self

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._log])
        app.router.add_post("/v2/sandboxes", self.create)
        app.router.add_delete("/sandboxes/{sid}", self.kill)
        app.router.add_get("/health", self.health)
        app.router.add_post("/process.Process/Start", self.start_process)
        app.router.add_post("/process.Process/SendSignal", self.send_signal)
        app.router.add_get("/files", self.read_file)
        app.router.add_post("/files", self.write_file)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)  # type: ignore[union-attr]
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        for box in list(self.boxes.values()):
            shutil.rmtree(box.root, ignore_errors=True)

    @web.middleware
    async def _log(self, request: web.Request, handler: Any) -> Any:
        self.calls.append((request.method, request.path))
        return await handler(request)

    # -- REST ------------------------------------------------------------------------------------
    def _api_auth(self, request: web.Request) -> None:
        if request.headers.get("X-API-KEY") != self.api_key:
            raise web.HTTPUnauthorized(text=json.dumps({"code": 401, "message": "Invalid API key"}),
                                       content_type="application/json")

    async def create(self, request: web.Request) -> web.Response:
        self._api_auth(request)
        body = await request.json()
        self.created.append(body)
        sid = "sbx" + secrets.token_hex(8)
        root = Path(tempfile.mkdtemp(prefix=f"e2b-{sid}-"))
        home = root / "home" / "user"
        home.mkdir(parents=True)
        # the "template": E2B's images have python on the login shell's PATH; here it is the
        # test's interpreter (the SDK runs every command with `bash -l -c`)
        bindir = Path(sys.executable).parent
        (home / ".bash_profile").write_text(f'export PATH="{bindir}:$PATH"\n')
        self.boxes[sid] = Box(sid, secrets.token_urlsafe(16), root, dict(body.get("envVars") or {}))
        return web.json_response({
            "sandboxID": sid, "templateID": body.get("templateID", "base"), "clientID": "standin",
            "envdVersion": ENVD_VERSION, "envdAccessToken": self.boxes[sid].token,
            "domain": None}, status=201)

    async def kill(self, request: web.Request) -> web.Response:
        self._api_auth(request)
        box = self.boxes.pop(request.match_info["sid"], None)
        if box is None:
            return web.json_response({"code": 404, "message": "sandbox not found"}, status=404)
        for proc in box.procs.values():
            if proc.returncode is None:
                proc.kill()
        shutil.rmtree(box.root, ignore_errors=True)
        self.killed.append(box.id)
        return web.Response(status=204)

    # -- envd ------------------------------------------------------------------------------------
    def _box(self, request: web.Request) -> Box:
        box = self.boxes.get(request.headers.get("E2b-Sandbox-Id", ""))
        if box is None:
            raise web.HTTPBadGateway(text="sandbox not found")
        if request.headers.get("X-Access-Token") != box.token:
            raise web.HTTPUnauthorized(text="wrong envd access token")
        return box

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def start_process(self, request: web.Request) -> web.StreamResponse:
        box = self._box(request)
        raw = await request.read()
        flags, size = struct.unpack(">BI", raw[:5])
        req = json.loads(raw[5:5 + size])
        cfg = req["process"]
        cwd = box.host_path(cfg.get("cwd") or "/home/user")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(box.root / "home/user"),
               **box.envs, **(cfg.get("envs") or {})}
        proc = await asyncio.create_subprocess_exec(
            cfg["cmd"], *cfg.get("args", []), cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        box.procs[proc.pid] = proc
        resp = web.StreamResponse(headers={"Content-Type": "application/connect+json"})
        await resp.prepare(request)
        deadline = request.headers.get("Connect-Timeout-Ms")
        try:
            await resp.write(envelope({"event": {"start": {"pid": proc.pid}}}))

            async def pump(stream: asyncio.StreamReader, name: str) -> None:
                while chunk := await stream.read(4096):
                    data = base64.b64encode(chunk).decode()
                    await resp.write(envelope({"event": {"data": {name: data}}}))

            work = asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"),  # type: ignore[arg-type]
                                  proc.wait())
            try:
                await asyncio.wait_for(work, int(deadline) / 1000 if deadline else None)
            except asyncio.TimeoutError:
                _kill_group(proc)
                await proc.wait()
                await resp.write(envelope({"error": {"code": "deadline_exceeded",
                                                     "message": "command timed out"}}, 2))
                return resp
            code = proc.returncode
            end = {"exitCode": code, "exited": True, "status": f"exit status {code}"}
            await resp.write(envelope({"event": {"end": end}}))
            await resp.write(envelope({}, 2))
        except (ConnectionResetError, asyncio.CancelledError):
            _kill_group(proc)  # the client went away: like envd, do not leave the process
            raise
        finally:
            box.procs.pop(proc.pid, None)
        return resp

    async def send_signal(self, request: web.Request) -> web.Response:
        box = self._box(request)
        body = await request.json()
        proc = box.procs.get(int(body["process"]["pid"]))
        if proc is None:
            return web.json_response({"code": "not_found", "message": "no such process"}, status=404)
        _kill_group(proc)
        return web.json_response({})

    async def read_file(self, request: web.Request) -> web.Response:
        box = self._box(request)
        path = box.host_path(request.query["path"])
        if not path.is_file():
            return web.json_response({"code": 404, "message": f"file not found: {request.query['path']}"},
                                     status=404)
        return web.Response(body=path.read_bytes(), content_type="application/octet-stream")

    async def write_file(self, request: web.Request) -> web.Response:
        box = self._box(request)
        out = []
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            name = request.query.get("path") or part.filename  # type: ignore[union-attr]
            path = box.host_path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(await part.read())  # type: ignore[union-attr]
            sandbox_path = "/" + str(path.relative_to(box.root.resolve()))
            out.append({"name": path.name, "type": "file", "path": sandbox_path})
        return web.json_response(out)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
