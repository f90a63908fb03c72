"""Resolve a run: plugin set (with the config's required plugins) plus the typed config."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from slime_core.config import Config, load_config
from slime_core.config.loader import parse_override, read_toml
from slime_core.config.names import (
    Sources,
    check_record_names,
    check_sections,
    remember_sources,
)
from slime_core.config.schema import build_schema
from slime_core.context import managing
from slime_core.pluginmgr import PluginSelection, SlimePluginManager


def _plugin_keys(path: str | Path | None, overrides: tuple[str, ...] | list[str],
                 data: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """``run.required_plugins`` and ``run.plugin_modules`` before the schema exists."""
    run: dict[str, Any] = {}
    if path is not None:
        run.update(read_toml(path).get("run", {}))
    if data:
        run.update(data.get("run", {}))
    for item in overrides:
        sec, key, value = parse_override(item)
        if sec == "run":
            run[key] = value
    req = run.get("required_plugins", []) or []
    mods = run.get("plugin_modules", []) or []
    return [str(x) for x in req], [str(x) for x in mods]


def resolve(
    selection: PluginSelection,
    config_path: str | Path | None = None,
    overrides: tuple[str, ...] | list[str] = (),
    data: dict[str, Any] | None = None,
    check_names: bool = True,
) -> tuple[SlimePluginManager, Config]:
    """Load plugins (adding the config's required plugins and modules), then the config.

    Every record name of the config (``algorithm.advantage_estimator``, ``rollout.engine``,
    ...) is resolved against the registries here, before anything is built
    (:mod:`slime_core.config.names`). ``check_names=False`` defers that to the driver, for
    callers that register in-memory plugins on the returned manager (tests).
    """
    required, modules = _plugin_keys(config_path, overrides, data)
    selection = replace(
        selection,
        required=sorted(set(selection.required) | set(required)),
        modules=list(dict.fromkeys([*selection.modules, *modules])),
    )
    manager = SlimePluginManager(selection).load()
    manager.check_pending()
    schema = build_schema(manager)
    sources = Sources.of(config_path, overrides, data)
    check_sections(manager, schema, sources)
    config = load_config(schema, config_path, overrides, data)
    with managing(manager):  # a slime_configure may look up records (get_registries)
        manager.hook.slime_configure.call_historic(kwargs={"config": config})
    remember_sources(config, sources)
    if check_names:
        check_record_names(manager, config, schema, sources)
    return manager, config


def load_run(config_path: str | Path | None = None,
             overrides: tuple[str, ...] | list[str] = (),
             required: tuple[str, ...] | list[str] = ()) -> Config:
    """The config ``core run --config FILE -o ...`` would resolve, with the plugin set it would
    load (``SLIME_PLUGINS`` and friends honoured) plus the ``required`` plugins, made this
    process's plugin manager.

    For commands that serve a run's engines without running it (the agent API on its own):
    afterwards ``get_registries()`` and ``accelerator_record(config)`` answer for that run.
    """
    from slime_core.context import set_manager

    selection = PluginSelection.from_cli()
    selection = replace(selection, required=sorted(set(selection.required) | set(required)))
    manager, config = resolve(selection, config_path, overrides)
    set_manager(manager)
    return config
