"""Which accelerator record a process uses: the executors, the driver, weight transports and
backends resolve ``run.accelerator`` here, so every one of them picks the same record."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import AcceleratorRecord

from slime_core.pluginmgr import SlimePluginManager


def select_accelerator(manager: SlimePluginManager, name: str) -> AcceleratorRecord:
    """``auto``: the available record with the highest priority; else the named record."""
    reg = manager.registries.accelerator
    if name != "auto":
        return reg.get(name)
    usable = [r for r in reg if r.unavailable_reason() is None]
    if not usable:
        found = "; ".join(f"{r.name} (plugin {r.owner}): {r.unavailable_reason()}"
                          for r in reg) or "none is registered"
        raise RuntimeError(
            f"run.accelerator = 'auto': no accelerator record is available ({found}); "
            "enable or install a plugin that registers one (core plugins --all lists them)")
    return max(usable, key=lambda r: r.priority)


def accelerator_record(config: Any) -> AcceleratorRecord:
    """The accelerator record that ``run.accelerator`` names in this process's plugin manager
    (``auto`` resolved as the executors resolve it): its static fields (``device_type``,
    ``dist_backend``, ``ray_resource``) are what a backend needs to match the executor, e.g.
    the backend of a process group it must create itself."""
    from slime_core.context import get_manager

    return select_accelerator(get_manager(), config.run.accelerator)
