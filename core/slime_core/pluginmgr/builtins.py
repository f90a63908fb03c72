"""The core's default plugins, registered before any entry point (as pytest's ``default_plugins``).

Each entry is ``(name, module, essential)``. Essential built-ins hold what the core cannot run
without (its own config sections and default loop); disabling one is a usage error.
"""

from __future__ import annotations

BUILTIN_PLUGINS: tuple[tuple[str, str, bool], ...] = (
    ("core_config", "slime_core.builtin.config_sections", True),
    ("core_loop", "slime_core.builtin.loop_defaults", True),
)

ESSENTIAL = frozenset(name for name, _, essential in BUILTIN_PLUGINS if essential)


def default_plugin_names() -> list[str]:
    """The plugins a run has unless it disables them: the non-essential built-ins and the
    default plugins installed (entry-point group ``slime.defaults``)."""
    import sys

    if sys.version_info >= (3, 10):
        from importlib.metadata import entry_points
    else:  # pragma: no cover
        from importlib_metadata import entry_points

    from slime_hookspecs import DEFAULT_ENTRY_POINT_GROUP

    names = [name for name, _, essential in BUILTIN_PLUGINS if not essential]
    return names + sorted({ep.name for ep in entry_points(group=DEFAULT_ENTRY_POINT_GROUP)})
