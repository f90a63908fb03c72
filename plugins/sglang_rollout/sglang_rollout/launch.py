"""Starting and stopping ``sglang.launch_server`` and ``sglang_router.launch_router`` processes.

Each process runs in its own session (process group) with stdout and stderr in a log file, so
:meth:`ManagedProcess.stop` can end the server together with the scheduler and detokenizer
processes it spawns, and a failed start reports the end of that log. Processes still running
when the interpreter exits are stopped by an ``atexit`` handler.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_rollout.config import SGLangSection

_LIVE: weakref.WeakSet[ManagedProcess] = weakref.WeakSet()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on now (the OS's choice)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def flag_list(args: dict[str, Any], where: str = "sglang.server_args") -> list[str]:
    """``{"chunked_prefill_size": 4096, "enable_metrics": True}`` -> CLI flags.

    ``True`` -> the bare flag, ``False``/``None`` -> left out, a list -> the flag then each
    item (argparse ``nargs``), anything else -> the flag and ``str(value)``.
    """
    out: list[str] = []
    for key, value in args.items():
        if not isinstance(key, str) or not key or key.startswith("-"):
            raise ValueError(f"{where}: key {key!r} must be an option name without dashes "
                             "(e.g. chunked_prefill_size)")
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            out.extend([flag, *(str(v) for v in value)])
        elif isinstance(value, dict):
            import json

            out.extend([flag, json.dumps(value)])
        else:
            out.extend([flag, str(value)])
    return out


def server_command(sec: SGLangSection, *, model_path: str, port: int, nccl_port: int,
                   engine_index: int, seed: int, tokenizer_path: str = "",
                   trust_remote_code: bool = False, dtype: str = "auto",
                   extra_args: list[str] | None = None) -> list[str]:
    """``python -m sglang.launch_server ...`` for engine ``engine_index`` (its GPUs start at
    ``base_gpu_id + engine_index * tp_size``).

    ``dtype`` is ``rollout.dtype`` or else ``model.dtype`` (``slime_core.api.rollout_dtype``):
    anything but ``auto`` becomes ``--dtype`` (unless ``server_args`` sets it), so the server
    generates with the weights the trainer trains, or their ``rollout.dtype`` rounding
    (SGLang's own default reads the checkpoint's ``torch_dtype``, e.g. bf16 for an fp32 run).
    ``extra_args``: flags the engine needs (a LoRA run's, :func:`sglang_rollout.lora.launch_flags`),
    before ``server_args``.
    """
    if not model_path:
        raise ValueError(
            "launching SGLang needs a model directory: set sglang.model_path or model.path "
            "(or attach to running servers with sglang.urls)"
        )
    cmd = [sec.python or sys.executable, "-m", "sglang.launch_server",
           "--model-path", model_path,
           "--host", sec.host, "--port", str(port), "--nccl-port", str(nccl_port),
           "--tp-size", str(sec.tp_size),
           "--base-gpu-id", str(sec.base_gpu_id + engine_index * sec.tp_size),
           "--random-seed", str(seed + engine_index),
           # warm-up generation can outlast the readiness wait on a cold GPU; slime skips it too
           "--skip-server-warmup"]
    if tokenizer_path and tokenizer_path != model_path:
        cmd += ["--tokenizer-path", tokenizer_path]
    if trust_remote_code:
        cmd.append("--trust-remote-code")
    if sec.mem_fraction_static:
        cmd += ["--mem-fraction-static", str(sec.mem_fraction_static)]
    if sec.enable_sleep:
        cmd.append("--enable-memory-saver")
    if sec.api_key:
        cmd += ["--api-key", sec.api_key]
    if dtype and dtype != "auto" and "dtype" not in sec.server_args:
        cmd += ["--dtype", dtype]
    return cmd + list(extra_args or []) + flag_list(sec.server_args)


def served_dtype(sec: SGLangSection, dtype: str) -> str | None:
    """The dtype the server holds its weights in, where slime knows it: ``server_args``'
    ``dtype``, else ``dtype`` (:func:`server_command`'s); None for ``auto`` (the checkpoint's)."""
    chosen = str(sec.server_args.get("dtype") or dtype or "")
    return None if chosen in ("", "auto") else chosen


def router_command(sec: SGLangSection, host: str, port: int) -> list[str]:
    """``python -m sglang_router.launch_router`` on ``host:port`` with no workers yet (each
    engine registers its server through ``POST /workers``)."""
    return [sec.python or sys.executable, "-m", "sglang_router.launch_router",
            "--host", host, "--port", str(port), *flag_list(sec.router_args, "sglang.router_args")]


#: (text in a server's log, what it means): failures met when starting real servers, each
#: seen in a device run (plugins/sglang_rollout/README.md), said in slime's terms
KNOWN_FAILURES: tuple[tuple[str, str], ...] = (
    ("failed to dispatch data type Float",
     "SGLang's sgl_kernel has no float32 kernel for one of this model's layers (0.5.17: "
     "rmsnorm), so the server cannot serve model.dtype = \"float32\": keep training in fp32 "
     "and serve bf16 with rollout.dtype = \"bfloat16\", or set model.dtype = \"bfloat16\""),
    ("is already used by a Transformers config",
     "this SGLang does not import beside the installed transformers (0.5.17 needs 5.12.1; "
     "it fails with 5.13 and later): give the server its own with sglang.env = "
     "{PYTHONPATH = \"<dir with transformers 5.12.1>\"} or sglang.python"),
)


def failure_hints(log_text: str) -> list[str]:
    """What the known failures found in ``log_text`` mean (:data:`KNOWN_FAILURES`)."""
    return [hint for needle, hint in KNOWN_FAILURES if needle in log_text]


class ManagedProcess:
    """A child process in its own session, logging to ``log_path``."""

    def __init__(self, name: str, cmd: list[str], log_path: Path,
                 env: dict[str, str] | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.name, self.cmd, self.log_path = name, list(cmd), Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        child_env = dict(os.environ if env is None else env)
        child_env.update(extra_env or {})
        # SGLang's memory saver does not support expandable segments (slime drops them too)
        child_env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        child_env.pop("PYTORCH_ALLOC_CONF", None)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=child_env,
                                         start_new_session=True)
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(log {self.log_path} unreadable: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def hints(self) -> str:
        """The known failures in this process's log, one "hint:" line each ('' for none)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "".join(f"\nhint: {h}" for h in failure_hints(text))

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float, what: str,
                   interval_s: float = 0.5) -> None:
        """Poll ``ready()`` until True; fail if the process exits or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            if ready():
                return
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(
                    f"{self.name} exited with code {code} before {what}; command: "
                    f"{' '.join(self.cmd)}\nlast lines of {self.log_path}:\n{self.log_tail()}"
                    f"{self.hints()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"{self.name} did not pass {what} within {timeout_s:g} s (stopped it); "
                    f"last lines of {self.log_path}:\n{self.log_tail()}{self.hints()}"
                )
            time.sleep(interval_s)

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace_s``; returns the exit code."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        # children the server spawned may outlive it in the group: end them too
        self._signal(signal.SIGKILL)
        _LIVE.discard(self)
        return self.proc.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@atexit.register
def _stop_all() -> None:
    for p in list(_LIVE):
        p.stop(grace_s=5.0)
