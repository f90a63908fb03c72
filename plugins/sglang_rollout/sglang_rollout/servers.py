"""The server behind one engine: attached (``sglang.urls[i]``) or launched here, optionally
registered with an sglang-router (launched by engine 0 when ``sglang.launch_router``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from slime_core.api import rollout_dtype

from sglang_rollout import router as router_api
from sglang_rollout.config import SGLangSection
from sglang_rollout.http import LoopThread, ServerClient
from sglang_rollout.launch import ManagedProcess, free_port, router_command, server_command
from sglang_rollout.probe import launch_unavailable_reason

log = logging.getLogger(__name__)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def log_dir(config: Any, sec: SGLangSection) -> Path:
    if sec.log_dir:
        return Path(sec.log_dir)
    run = config.run
    return Path(run.run_dir or run.output_dir) / "sglang"


class Servers:
    """Attach or launch engine ``engine_index``'s server; :attr:`url` is its base URL."""

    def __init__(self, config: Any, sec: SGLangSection, engine_index: int,
                 loop: LoopThread, extra_args: list[str] | None = None) -> None:
        self.sec, self.index, self.loop = sec, engine_index, loop
        self.extra_args = list(extra_args or [])  # launch flags the engine adds (LoRA)
        self.proc: ManagedProcess | None = None
        self.router_proc: ManagedProcess | None = None
        self.router: ServerClient | None = None
        self.registered = False
        try:
            self._start(config)
        except BaseException:
            self.stop()
            raise

    def _start(self, config: Any) -> None:
        sec, n = self.sec, int(config.rollout.num_engines)
        if sec.attach:
            if len(sec.urls) != n:
                raise ValueError(
                    f"sglang.urls lists {len(sec.urls)} server(s) but rollout.num_engines = {n}: "
                    "give one URL per engine"
                )
            self.url = sec.urls[self.index]
        else:
            if not sec.launch:
                raise ValueError(
                    "sglang.urls is empty and sglang.launch is false: no server to generate "
                    "with; list running servers in sglang.urls or set sglang.launch = true"
                )
            why = launch_unavailable_reason(sec.python, sec.env)
            if why:
                raise RuntimeError(f"cannot launch SGLang servers here: {why} (to use running "
                                   "servers instead, list them in sglang.urls)")
            self._launch(config)
        if sec.router_url:
            self.router = ServerClient(sec.router_url, sec.api_key)
            if sec.launch_router and self.index == 0:
                self._launch_router(config)
            # a router we launch knows no server yet; an external one is assumed to know the
            # external servers already (registering them again is harmless, but not ours to do)
            if sec.register_with_router and (not sec.attach or sec.launch_router):
                self._register()

    def _launch(self, config: Any) -> None:
        sec = self.sec
        port = sec.port + self.index if sec.port else free_port(sec.host)
        cmd = server_command(
            sec, model_path=sec.model_path or config.model.path, port=port,
            nccl_port=free_port(sec.host), engine_index=self.index, seed=int(config.run.seed),
            tokenizer_path=config.model.tokenizer,
            trust_remote_code=bool(config.model.trust_remote_code),
            dtype=rollout_dtype(config), extra_args=self.extra_args,
        )
        self.url = _url(sec.host, port)
        self.proc = ManagedProcess(f"SGLang server of engine {self.index} ({self.url})", cmd,
                                   log_dir(config, sec) / f"engine_{self.index}.log",
                                   extra_env=sec.env)
        probe = ServerClient(self.url, sec.api_key)
        try:
            self.proc.wait_ready(
                lambda: self.loop.run(probe.ok("GET", "/health_generate", sec.health_timeout_s)),
                sec.startup_timeout_s, "GET /health_generate")
        finally:
            self.loop.run(probe.close())

    def _launch_router(self, config: Any) -> None:
        sec = self.sec
        parsed = urlparse(sec.router_url)
        assert parsed.hostname is not None and parsed.port is not None  # checked by the config
        self.router_proc = ManagedProcess(
            f"sglang-router ({sec.router_url})",
            router_command(sec, parsed.hostname, parsed.port),
            log_dir(config, sec) / "router.log", extra_env=sec.env)
        self._wait_router(self.router_proc)

    def _wait_router(self, proc: ManagedProcess | None) -> None:
        assert self.router is not None
        router, sec = self.router, self.sec

        def up() -> bool:
            return self.loop.run(router.ok("GET", "/health", sec.health_timeout_s))

        if proc is not None:
            proc.wait_ready(up, sec.startup_timeout_s, "GET /health")
            return
        import time

        deadline = time.monotonic() + sec.startup_timeout_s
        while not up():
            if time.monotonic() > deadline:
                raise TimeoutError(f"sglang-router {router.url} did not answer GET /health within "
                                   f"{sec.startup_timeout_s:g} s")
            time.sleep(0.5)

    def _register(self) -> None:
        assert self.router is not None
        self._wait_router(None)
        self.loop.run(router_api.register(self.router, self.url, self.sec.control_timeout_s,
                                          self.sec.startup_timeout_s))
        self.registered = True

    def alive(self) -> bool:
        return self.proc is None or self.proc.alive()

    def stop(self) -> None:
        """Deregister (best effort), then stop what this engine launched."""
        if self.registered and self.router is not None:
            try:
                self.loop.run(router_api.deregister(self.router, self.url,
                                                    self.sec.health_timeout_s))
            except Exception as exc:  # noqa: BLE001 - the server is stopped anyway
                log.warning("could not remove %s from sglang-router %s: %s",
                            self.url, self.router.url, exc)
            self.registered = False
        if self.proc is not None:
            self.proc.stop()
        if self.router_proc is not None:
            self.router_proc.stop()
        if self.router is not None:
            try:
                self.loop.run(self.router.close(), timeout=10)
            except Exception:  # noqa: BLE001
                pass
