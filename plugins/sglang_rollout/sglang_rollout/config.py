"""The ``[sglang]`` configuration section (contributed through ``slime_add_config``).

Two ways to get servers, one per engine (``rollout.num_engines``):

* **attach**: ``urls`` lists running SGLang servers (``http://host:port``), engine ``i`` owns
  ``urls[i]``; works on any host, the engine only speaks HTTP.
* **launch** (``urls`` empty and ``launch = true``): engine ``i`` starts
  ``python -m sglang.launch_server`` on ``host`` with GPUs ``base_gpu_id + i * tp_size ...``,
  waits for ``/health_generate``, writes its log under ``log_dir`` and stops it at shutdown.

With ``router_url`` every ``/generate`` goes through that sglang-router (which balances across
its workers); control calls (weights, flush, pause, abort, memory) still go to each engine's own
server, as slime does. Ranges are checked here so a bad value fails naming its key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

SECTION = "sglang"
PAUSE_MODES = ("abort", "retract", "in_place")


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{SECTION}.{key}: {msg}")


def normalize_url(url: str, key: str = "urls") -> str:
    """``host:port`` or ``http(s)://host:port[/]`` -> ``http(s)://host:port``; else ValueError."""
    raw = url.strip()
    full = raw if "://" in raw else f"http://{raw}"
    full = full.rstrip("/")
    parsed = urlparse(full)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.port is None:
        raise ValueError(
            f"{SECTION}.{key}: {url!r} is not an SGLang server address; write host:port or "
            "http://host:port (IPv6 in brackets)"
        )
    if parsed.path or parsed.query:
        raise ValueError(f"{SECTION}.{key}: {url!r} must not have a path or query ({parsed.path!r})")
    return full


@dataclass
class SGLangSection:
    urls: list[str] = field(default_factory=list)  # external servers, one per engine (attach)
    router_url: str = ""  # generate through this sglang-router
    launch: bool = True  # launch one server per engine when urls is empty
    launch_router: bool = False  # engine 0 starts sglang-router at router_url
    register_with_router: bool = True  # servers we launch, or all if we launch the router, join it
    router_args: dict[str, Any] = field(default_factory=dict)  # extra --flags for launch_router
    model_path: str = ""  # what launched servers load (empty: model.path)
    python: str = ""  # interpreter for launch_server / the router (empty: this one); SGLang pins its own torch and transformers, so it often lives in an environment of its own
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables of launched servers and the router (e.g. {PYTHONPATH = "/opt/sglang-site"}); also used by the availability probe when python or env is set
    host: str = "127.0.0.1"  # where launched servers listen
    port: int = 0  # first port of launched servers (0: any free port)
    tp_size: int = 1  # GPUs per launched server (--tp-size)
    base_gpu_id: int = 0  # first GPU; engine i starts at base_gpu_id + i * tp_size
    mem_fraction_static: float = 0.0  # --mem-fraction-static (0: SGLang's default)
    enable_sleep: bool = False  # --enable-memory-saver; sleep()/wake_up() release/resume memory
    server_args: dict[str, Any] = field(default_factory=dict)  # extra --flags for launch_server
    log_dir: str = ""  # launched servers' logs (empty: <run dir>/sglang)
    api_key: str = ""  # sent as "Authorization: Bearer <key>"; passed to launched servers
    startup_timeout_s: float = 900.0  # launched server must answer /health_generate by then
    request_timeout_s: float = 3600.0  # one /generate
    control_timeout_s: float = 600.0  # weight updates, memory release/resume, pause/continue
    health_timeout_s: float = 5.0  # one /health_generate (x4: /abort_request, /model_info)
    flush_cache_timeout_s: float = 60.0  # /flush_cache is retried until it succeeds
    max_concurrency: int = 256  # /generate requests in flight per engine
    pause_during_weight_update: bool = True  # pause_generation + flush_cache around updates
    pause_mode: str = "abort"  # /pause_generation mode: abort | retract | in_place
    abort_retry_s: float = 1.0  # re-send abort_all while aborted requests are still running
    check_weights: bool = True  # after each disk / tensor weight update, read the first rows of a few tensors back (/get_weights_by_name) and fail on a difference; skipped with a warning where the model cannot answer
    skip_special_tokens: bool = True  # of the returned text (token ids are never affected)
    lora_dir: str = ""  # LoRA runs: where each sync's adapter directory is written for the server to read (empty: a temporary folder on the engine's host, right for launched servers; attached servers on other hosts need a shared folder)

    def __post_init__(self) -> None:
        self.urls = [normalize_url(u, "urls") for u in self.urls]
        _need(len(set(self.urls)) == len(self.urls), "urls", f"lists a server twice: {self.urls}")
        if self.router_url:
            self.router_url = normalize_url(self.router_url, "router_url")
        _need(not self.launch_router or bool(self.router_url), "launch_router",
              "needs router_url (the address the router listens on)")
        _need(self.tp_size >= 1, "tp_size", "must be >= 1")
        _need(self.base_gpu_id >= 0, "base_gpu_id", "must be >= 0")
        _need(0 <= self.port < 65536, "port", "must be in [0, 65535]")
        _need(0.0 <= self.mem_fraction_static < 1.0, "mem_fraction_static", "must be in [0, 1)")
        for key in ("startup_timeout_s", "request_timeout_s", "control_timeout_s",
                    "health_timeout_s", "flush_cache_timeout_s", "abort_retry_s"):
            _need(getattr(self, key) > 0, key, "must be > 0")
        _need(self.max_concurrency >= 1, "max_concurrency", "must be >= 1")
        for key, value in self.env.items():
            _need(isinstance(key, str) and bool(key) and "=" not in key and isinstance(value, str),
                  "env", f"{key!r} = {value!r}: keys and values must be strings (keys without '=')")
        _need(self.pause_mode in PAUSE_MODES, "pause_mode", f"must be one of {', '.join(PAUSE_MODES)}")

    @property
    def attach(self) -> bool:
        """True when the engines use external servers (``urls``) instead of launching."""
        return bool(self.urls)


def section_of(config: Any) -> SGLangSection:
    """The ``[sglang]`` section of a resolved config (a default one if the config has none)."""
    sec = getattr(config, SECTION, None)
    return sec if isinstance(sec, SGLangSection) else SGLangSection()
