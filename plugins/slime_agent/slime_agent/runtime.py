"""The per-process agent runtime of a run: tokenizer, tool parser, tool executor, sandbox.

Built once per config (on first use, and eagerly at ``slime_run_start`` so a wrong tool,
parser or sandbox name fails the run before its first step, naming the valid choices).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from slime_agent.executor import ToolExecutor
from slime_agent.sections import section
from slime_agent.tools import ToolContext

_RUNTIMES: weakref.WeakKeyDictionary[Any, AgentRuntime] = weakref.WeakKeyDictionary()


class AgentRuntime:
    """Everything multi-turn generation needs, resolved from ``[tools]`` and the registries."""

    def __init__(self, config: Any, manager: Any, tokenizer: Any = None) -> None:
        cfg = section(config, "tools")
        self.config = config
        self.settings = cfg
        reg = manager.registries
        if tokenizer is None:
            from slime_core.api import load_tokenizer

            tokenizer = load_tokenizer(config.model)
        self.tokenizer = tokenizer
        records = {name: _get(reg.tool, name, "tools.enabled") for name in cfg.enabled}
        self.parser = _get(reg.tool_parser, cfg.parser, "tools.parser").factory(config, tokenizer)
        if not callable(self.parser):
            raise TypeError(f"tool parser {cfg.parser!r} factory returned a non-callable")
        self.stop: list[str] = [s for s in getattr(self.parser, "stop", []) if s]
        self.executor = ToolExecutor(config, records, cfg.timeout)
        self._sandbox_record = None
        if any(r.extra.get("needs_sandbox") for r in records.values()):
            self._sandbox_record = _get(reg.sandbox, cfg.sandbox, "tools.sandbox")
        self._sandbox_name = cfg.sandbox
        self._registry = reg

    def sandbox_factory(self) -> Callable[[], Any]:
        def make() -> Any:
            rec = self._sandbox_record or _get(self._registry.sandbox, self._sandbox_name,
                                               "tools.sandbox")
            return rec.factory(self.config, **dict(self.settings.sandbox_options))

        return make

    def context(self, sample: Any) -> ToolContext:
        return ToolContext(self.config, sample, sandbox_factory=self.sandbox_factory(),
                           timeout=self.settings.timeout)


def _get(registry: Any, name: str, key: str) -> Any:
    try:
        return registry.get(name)
    except (KeyError, RuntimeError) as exc:
        raise type(exc)(f"{key}: {exc}") from None


def get_runtime(config: Any, manager: Any = None, tokenizer: Any = None) -> AgentRuntime:
    """The runtime of ``config`` in this process (built on first call)."""
    rt = _RUNTIMES.get(config)
    if rt is None:
        if manager is None:
            from slime_core.api import get_manager

            manager = get_manager()
        rt = AgentRuntime(config, manager, tokenizer)
        _RUNTIMES[config] = rt
    return rt
