"""Build the components of a run from registry records (local executor)."""

from __future__ import annotations

from typing import Any

from slime_core.plugins import SlimePluginManager
from slime_hookspecs import AcceleratorRecord


def select_accelerator(manager: SlimePluginManager, name: str) -> AcceleratorRecord:
    """``auto``: the available record with the highest priority; else the named record."""
    reg = manager.registries.accelerator
    if name != "auto":
        return reg.get(name)
    usable = [r for r in reg if r.unavailable_reason() is None]
    if not usable:
        raise RuntimeError("no accelerator is available (not even cpu?)")
    return max(usable, key=lambda r: r.priority)


def make_data_source(manager: SlimePluginManager, config: Any, split: str) -> Any:
    custom = manager.hook.slime_make_data_source(config=config, split=split)
    if custom is not None:
        return custom
    return manager.registries.data_source.get(config.data.source).factory(config, split)


def has_eval(config: Any) -> bool:
    if config.eval.interval <= 0:
        return False
    return bool(config.data.eval_path) or config.data.source == "reasoning_gym"
