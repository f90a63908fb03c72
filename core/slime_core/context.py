"""The plugin manager of this process and the run context it carries.

Components built by factories (trainers, engines) call hooks; every process holds exactly one
manager, built by the driver or rebuilt in a Ray worker from the driver's plugin selection.
What a run's components share in a process beyond the config (the engine clients of the
rollout manager, the trainer's data-parallel group) is the manager's :class:`RunContext`, one
documented place instead of module globals in each package that needs it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slime_core.pluginmgr import SlimePluginManager

_MANAGER: SlimePluginManager | None = None


def set_manager(manager: SlimePluginManager) -> None:
    global _MANAGER
    _MANAGER = manager


def get_manager() -> SlimePluginManager:
    if _MANAGER is None:
        raise RuntimeError(
            "no slime plugin manager in this process: call slime_core.context.set_manager() "
            "(the driver and Ray workers do this)"
        )
    return _MANAGER


@contextmanager
def managing(manager: SlimePluginManager) -> Iterator[None]:
    """``manager`` is this process's while the block runs, the previous one (or none)
    afterwards: ``slime_configure`` implementations may look up records while a config is
    resolved (a plugin that replaces a choice builds on the user's)."""
    global _MANAGER
    previous = _MANAGER
    _MANAGER = manager
    try:
        yield
    finally:
        _MANAGER = previous


@dataclass
class RunContext:
    """What the components of a run share in one process, set by whoever owns each part.

    * ``engine_clients``: the rollout manager's :class:`~slime_core.api.EngineClient` of each
      engine, in engine order (set in the rollout manager's process when it is built, before
      ``slime_rollout_engines_ready`` fires; empty elsewhere);
    * ``dp_group``: the ``torch.distributed`` group the trainer of this process reduces over
      (``None``: the default group, every rank a data-parallel peer); set by the trainer
      backend before any hook that reduces over data-parallel ranks.
    """

    engine_clients: list[Any] = field(default_factory=list)
    dp_group: Any = None


_LONE_CONTEXT = RunContext()  # a process with no manager yet (a backend's unit test)


def engine_adapter(config: Any) -> Any:
    """The ``slime_engine_adapter`` answer in this process: the adapter a rollout engine serves
    instead of full weights (an ``EngineAdapter``), or None (syncs carry full weights, or no
    plugin manager here, as for an engine built outside a run)."""
    if _MANAGER is None:
        return None
    return _MANAGER.hook.slime_engine_adapter(config=config)


def config_notice(line: str) -> None:
    """Tell the user how a ``slime_configure`` resolved part of the config (slime-std's
    ``auto: train.compile = false (...)`` lines). The line is kept on the plugin manager being
    configured and printed to stderr by the driver once the config has passed its checks
    (record names, routing replay), so a config error is not buried under them; with no
    manager being configured it is printed at once."""
    if _MANAGER is None:
        print(line, file=sys.stderr)
    else:
        _MANAGER.notices.append(line)


def print_config_notices(manager: SlimePluginManager) -> None:
    """Print (once) the lines :func:`config_notice` kept on ``manager``."""
    for line in manager.notices:
        print(line, file=sys.stderr)
    manager.notices.clear()


def run_context() -> RunContext:
    """This process's :class:`RunContext` (its plugin manager's; one per process)."""
    if _MANAGER is None:
        return _LONE_CONTEXT
    ctx = getattr(_MANAGER, "run_context", None)
    if ctx is None:
        ctx = _MANAGER.run_context = RunContext()
    return ctx


def get_registries() -> Any:
    """The record registries of this process's plugin manager (``.trainer_backend``,
    ``.advantage_estimator``, ...; ``.get(kind)`` by kind name)."""
    return get_manager().registries


def rollout_engine_clients() -> list[Any]:
    """Deprecated, removed in slime-core 0.2: ``run_context().engine_clients``, or the hook
    ``slime_rollout_engines_ready(config, clients)``, which hands the same
    :class:`~slime_core.rollout.engine_client.EngineClient` list to the plugin in the rollout
    manager's process."""
    warnings.warn("slime_core.api.rollout_engine_clients() is deprecated and goes in slime-core "
                  "0.2: read slime_core.api.run_context().engine_clients, or implement the hook "
                  "slime_rollout_engines_ready(config, clients)",
                  DeprecationWarning, stacklevel=2)
    return list(run_context().engine_clients)


def run_agent_api(config: Any) -> Any:
    """Deprecated, removed in slime-core 0.2: the agent API moved with the agentic wing to the
    slime-agent distribution; call :func:`slime_agent.run_agent_api` (same arguments, same
    server). Found through the loaded plugin ``slime_agent`` (the core imports no plugin)."""
    import sys

    warnings.warn("slime_core.api.run_agent_api() is deprecated and goes in slime-core 0.2: "
                  "the agent API is slime-agent's, call slime_agent.run_agent_api(config)",
                  DeprecationWarning, stacklevel=2)
    plugin = get_manager().pluggy.get_plugin("slime_agent") if _MANAGER is not None else None
    package = sys.modules.get(getattr(plugin, "__name__", "").rpartition(".")[0])
    if package is None or not hasattr(package, "run_agent_api"):
        raise RuntimeError("the agent API is part of slime-agent, which is not installed or not "
                           "loaded in this process: pip install slime-agent")
    return package.run_agent_api(config)
