"""The host side of one bwrap run: killing its jail, capped output, bwrap's info and id maps."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Running:
    """One bwrap process and, once bwrap reported it, the host pid of the jail's init."""

    proc: asyncio.subprocess.Process
    init_pid: int | None = None
    pidfd: int | None = None
    killed: bool = False

    def kill(self) -> None:
        """SIGKILL the jail's pid-namespace init (killing all of it) and bwrap's session."""
        self.killed = True
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        elif self.init_pid is not None and self.proc.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(self.init_pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def release(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


@dataclass
class CappedOutput:
    """Reads a stream to its end, keeping at most ``cap`` bytes."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    truncated: bool = False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(1 << 16):
            room = self.cap - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if len(chunk) > room:
                self.truncated = True

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def write_id_map(pid: int, name: str, inner: int, host: int) -> None:
    """Inside id 0 is host root (bwrap's setup only), ``inner`` is the unprivileged ``host``."""
    with open(f"/proc/{pid}/{name}", "w", encoding="ascii") as fh:
        fh.write(f"0 0 1\n{inner} {host} 1\n")


async def read_json(fd: int) -> dict[str, Any] | None:
    """The JSON document bwrap writes on ``--info-fd``; ``None`` if it closes without one."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(fd), "rb", buffering=0)
    )
    data = b""
    try:
        while chunk := await reader.read(4096):
            data += chunk
            try:
                return json.loads(data)
            except ValueError:
                continue
        return None
    finally:
        transport.close()
