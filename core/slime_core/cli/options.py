"""Options shared by the commands that load plugins."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from slime_core.pluginmgr import (
    PluginLoadError,
    PluginSelection,
    PluginUsageError,
    SlimePluginManager,
)


def selection_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--plugins``, ``--disable-plugin``, ``--disable-plugin-autoload``, ``--trace-hooks``."""

    @click.option("--plugins", "plugins", default=None, metavar="A,B",
                  help="Exact set of external plugins to load (entry-point names). "
                       "Env: SLIME_PLUGINS.")
    @click.option("--disable-plugin", "disabled", multiple=True, metavar="NAME",
                  help="Do not load this plugin (repeatable). Env: SLIME_DISABLE_PLUGINS.")
    @click.option("--disable-plugin-autoload", is_flag=True, default=False,
                  help="Load only plugins named by --plugins. Env: SLIME_DISABLE_PLUGIN_AUTOLOAD=1.")
    @click.option("--trace-hooks", is_flag=True, default=False,
                  help="Print every hook call with its duration. Env: SLIME_TRACE_HOOKS=1.")
    @functools.wraps(fn)
    def wrapper(*args: Any, plugins: str | None, disabled: tuple[str, ...],
                disable_plugin_autoload: bool, trace_hooks: bool, **kwargs: Any) -> Any:
        parent = click.get_current_context().find_root().params
        selection = PluginSelection.from_cli(
            plugins=plugins if plugins is not None else parent.get("plugins"),
            disabled=tuple(disabled) + tuple(parent.get("disabled") or ()),
            disable_autoload=disable_plugin_autoload or bool(parent.get("disable_plugin_autoload")),
            trace=trace_hooks or bool(parent.get("trace_hooks")),
        )
        return fn(*args, selection=selection, **kwargs)

    return wrapper


def load_manager(selection: PluginSelection) -> SlimePluginManager:
    """Build the plugin manager or exit with a usage/load error message."""
    try:
        return SlimePluginManager(selection).load()
    except PluginUsageError as exc:
        raise click.UsageError(str(exc)) from exc
    except PluginLoadError as exc:
        raise click.ClickException(str(exc)) from exc
