"""Config sections of the agentic rollouts: ``[tools]``, ``[agent_api]``, ``[rollout_buffer]``.

Contributed by the built-in plugin ``core_tools`` through ``slime_add_config``. Ranges are
checked here so a bad value fails naming its key; names of records (tools, parser, sandbox,
prompt source) are checked when the run starts, against the registries.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

DEFAULT_RAW_OBSERVATION = "\n<tool_response>\n{observation}\n</tool_response>\n"


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {msg}")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool, section: str) -> None:
    """Refuse a non-loopback bind address unless ``<section>.allow_remote`` is set."""
    if not is_loopback(host) and not allow_remote:
        raise ValueError(
            f"{section}.host = {host!r} is not a loopback address; the service is meant for "
            f"this machine only. Set {section}.allow_remote = true to serve other machines "
            "(the bearer token is then the only protection)"
        )


@dataclass
class ToolsSection:
    """Multi-turn rollouts with tools; off while ``enabled`` is empty."""

    enabled: list[str] = field(default_factory=list)  # tool records the model may call
    max_turns: int = 4  # model generations per episode (tool results in between)
    parser: str = "hermes"  # tool-parser record that finds calls in the model's output
    sandbox: str = "local"  # sandbox record for code-running tools (python)
    sandbox_options: dict[str, Any] = field(default_factory=dict)  # kwargs of its factory
    timeout: float = 30.0  # seconds per tool call
    max_observation_tokens: int = 256  # tokens kept of one tool result (the rest is cut)
    max_calls_per_turn: int = 4  # further calls of one turn get an error observation
    # "" : the chat template's tool message when the prompt is chat messages, else
    # DEFAULT_RAW_OBSERVATION; otherwise a str.format template with {observation}
    observation_template: str = ""

    def __post_init__(self) -> None:
        _need(self.max_turns >= 1, "tools.max_turns", "must be >= 1")
        _need(self.timeout > 0, "tools.timeout", "must be > 0 seconds")
        _need(self.max_observation_tokens >= 1, "tools.max_observation_tokens", "must be >= 1")
        _need(self.max_calls_per_turn >= 1, "tools.max_calls_per_turn", "must be >= 1")
        _need(len(set(self.enabled)) == len(self.enabled), "tools.enabled",
              f"lists a tool twice: {self.enabled}")
        if self.observation_template:
            try:
                self.observation_template.format(observation="x")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(
                    f"tools.observation_template {self.observation_template!r} is not a "
                    f"str.format template with an {{observation}} field ({exc}); write literal "
                    "braces as {{ and }}"
                ) from None


@dataclass
class AgentApiSection:
    """The OpenAI-compatible endpoint in front of the rollout engines."""

    host: str = "127.0.0.1"  # bind address (loopback unless allow_remote)
    port: int = 0  # 0: any free port (the URL is printed and handed to rollout-buffer workers)
    token: str = ""  # bearer token; empty: a random one per run
    allow_remote: bool = False  # allow a non-loopback host
    model_name: str = "slime"  # the "model" the endpoint reports
    tool_parser: str = "hermes"  # parser for tool calls when a request carries tools
    max_tokens: int = 0  # cap of max_tokens per request (0: rollout.max_new_tokens)
    max_sessions: int = 4096  # open sessions at once
    session_ttl_s: float = 3600.0  # idle sessions are dropped after this many seconds
    max_context_tokens: int = 0  # prompt + completion tokens per request (0: engine's context)

    def __post_init__(self) -> None:
        _need(0 <= self.port <= 65535, "agent_api.port", "must be in 0..65535")
        _need(self.max_tokens >= 0, "agent_api.max_tokens", "must be >= 0")
        _need(self.max_context_tokens >= 0, "agent_api.max_context_tokens", "must be >= 0")
        _need(self.max_sessions >= 1, "agent_api.max_sessions", "must be >= 1")
        _need(self.session_ttl_s > 0, "agent_api.session_ttl_s", "must be > 0")
        check_bind(self.host, self.allow_remote, "agent_api")


@dataclass
class RolloutBufferSection:
    """The rollout-buffer service (``data.source = "rollout_buffer"``)."""

    url: str = ""  # an external service (``core rollout-buffer``); empty: start one in-process
    host: str = "127.0.0.1"  # bind address of the in-process service
    port: int = 0  # 0: any free port
    token: str = ""  # bearer token; required with url (or SLIME_ROLLOUT_BUFFER_TOKEN)
    allow_remote: bool = False  # allow a non-loopback host
    prompt_source: str = "jsonl"  # data-source record that supplies the prompts
    serve_engine_api: bool = True  # start [agent_api] and hand its URL and token to workers
    task_type: str = ""  # free-form, handed to workers with every job
    task_kwargs: dict[str, Any] = field(default_factory=dict)  # handed to workers too
    timeout_s: float = 600.0  # longest wait for a full batch before the step fails
    poll_s: float = 5.0  # long-poll of one fetch
    task_timeout_s: float = 300.0  # a job not written back by then goes back to the queue
    prefetch_groups: int = 0  # prompts queued beyond the batch, to keep workers busy
    max_body_mb: float = 16.0  # largest request body (MiB) of the in-process service: larger is a 413, refused from Content-Length before it is read
    header_timeout_s: float = 30.0  # the in-process service closes a connection that sends no complete request (headers) for this long

    def __post_init__(self) -> None:
        _need(0 <= self.port <= 65535, "rollout_buffer.port", "must be in 0..65535")
        _need(self.timeout_s > 0, "rollout_buffer.timeout_s", "must be > 0")
        _need(self.poll_s > 0, "rollout_buffer.poll_s", "must be > 0")
        _need(self.task_timeout_s > 0, "rollout_buffer.task_timeout_s", "must be > 0")
        _need(self.prefetch_groups >= 0, "rollout_buffer.prefetch_groups", "must be >= 0")
        _need(self.max_body_mb > 0, "rollout_buffer.max_body_mb", "must be > 0 (MiB)")
        _need(self.header_timeout_s > 0, "rollout_buffer.header_timeout_s", "must be > 0")
        if not self.url:
            check_bind(self.host, self.allow_remote, "rollout_buffer")
        else:
            _need(self.url.startswith(("http://", "https://")), "rollout_buffer.url",
                  f"must be an http(s) URL, got {self.url!r}")


SECTIONS = (
    ("tools", ToolsSection, "multi-turn rollouts: tools, parser, sandbox, limits"),
    ("agent_api", AgentApiSection, "OpenAI-compatible endpoint for external agents"),
    ("rollout_buffer", RolloutBufferSection, "rollout-buffer service between trainer and agents"),
)


def section(config: Any, name: str) -> Any:
    """``config.<name>``, or the section's defaults when the config lacks it (core-only tests)."""
    try:
        return getattr(config, name)
    except AttributeError:
        for n, cls, _ in SECTIONS:
            if n == name:
                return cls()
        raise
