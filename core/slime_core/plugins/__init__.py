"""Plugin discovery, selection, loading and the registries built from registration hooks."""

from slime_core.plugins.manager import (
    PluginInfo,
    PluginLoadError,
    PluginSelection,
    PluginUsageError,
    SlimePluginManager,
    build_plugin_manager,
)
from slime_core.plugins.registry import (
    DuplicateRecordError,
    Registries,
    UnavailableRecordError,
    UnknownRecordError,
)

__all__ = [
    "DuplicateRecordError",
    "PluginInfo",
    "PluginLoadError",
    "PluginSelection",
    "PluginUsageError",
    "Registries",
    "SlimePluginManager",
    "UnavailableRecordError",
    "UnknownRecordError",
    "build_plugin_manager",
]
