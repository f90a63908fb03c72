"""The plugin manager of this process.

Components built by factories (trainers, engines) call hooks; every process holds exactly one
manager, built by the driver or rebuilt in a Ray worker from the driver's plugin selection.
"""

from __future__ import annotations

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


def get_registries() -> Any:
    """The record registries of this process's plugin manager (``.trainer_backend``,
    ``.advantage_estimator``, ...; ``.get(kind)`` by kind name)."""
    return get_manager().registries


_ENGINE_CLIENTS: list[Any] = []


def set_rollout_engine_clients(clients: list[Any]) -> None:
    """The engine clients of this process's rollout manager (set by the manager when it is
    built; what the agent API and plugins that generate outside ``slime_generate`` serve)."""
    global _ENGINE_CLIENTS
    _ENGINE_CLIENTS = list(clients)


def rollout_engine_clients() -> list[Any]:
    """The :class:`~slime_core.rollout.engine_client.EngineClient` of each rollout engine of this
    process's rollout manager (empty where there is none: trainer ranks, listing commands).
    For plugins that generate outside ``slime_generate`` (e.g. an HTTP front of the engines)."""
    return list(_ENGINE_CLIENTS)
