"""The plugin manager: plugin discovery, selection, loading, the registries built from the
registration hooks, and the hook tracer (``--trace-hooks``).

Named ``pluginmgr`` (after pluggy's ``PluginManager``, which it wraps), not ``plugins``: the
plugins themselves live in the repository's top-level ``plugins/`` and in ``builtin/``; this
package is the machinery that finds and holds them.
"""

from slime_core.pluginmgr.manager import (
    PluginInfo,
    PluginLoadError,
    PluginSelection,
    PluginUsageError,
    SlimePluginManager,
    build_plugin_manager,
)
from slime_core.pluginmgr.registry import (
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
