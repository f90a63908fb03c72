"""Record names in a config, resolved against the registries before anything is built.

A config section declares which of its keys name records (``ConfigSection.record_keys``, see
:class:`slime_hookspecs.RecordKey`). :func:`check_record_names` looks every such value up
when the config is resolved, so ``-o algorithm.advantage_estimator=grpoo`` fails in a second,
not after a model has loaded and the first rollout has run. The message names the key, the
value, where it was set (the TOML file, the ``-o`` override, the caller's data, a plugin's
``slime_configure`` or the default), the names available, the nearest one, and the plugin that
would provide the name when one is installed but not active.

A value still at its default is checked only when its registry has records: a process that
loaded no algorithm plugin (``core plugins``, tests of the core alone) has no advantage
estimators at all, and leaves ``algorithm.advantage_estimator`` at the core's empty default
(the algorithm plugin names its own record as the default when it is active).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_hookspecs import PROJECT_NAME, ConfigSection, Record, RecordKey

from slime_core.config.loader import parse_override, read_toml
from slime_core.config.model import ConfigError
from slime_core.config.schema import build_schema

if TYPE_CHECKING:
    from slime_core.config.model import Config
    from slime_core.config.schema import ConfigSchema
    from slime_core.pluginmgr.manager import SlimePluginManager

DEFAULT = "default"


@dataclass
class Sources:
    """Where each ``section.key`` of a config was set, and the raw value set there."""

    where: dict[tuple[str, str], tuple[str, Any]] = dataclasses.field(default_factory=dict)
    sections: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, path: str | Path | None, overrides: tuple[str, ...] | list[str] = (),
           data: dict[str, Any] | None = None) -> Sources:
        """Replay the loader's merge order (file, then ``data``, then ``-o``) keeping origins."""
        out = cls()

        def put(origin: str, table: dict[str, Any]) -> None:
            for sec, values in table.items():
                out.sections.setdefault(sec, origin)
                if isinstance(values, dict):
                    for key, value in values.items():
                        out.where[(sec, key)] = (origin, value)

        if path is not None:
            put(str(path), read_toml(path))
        if data:
            put("the config data passed to resolve()", data)
        for item in overrides:
            sec, key, value = parse_override(item)
            out.sections.setdefault(sec, f"-o {item}")
            out.where[(sec, key)] = (f"-o {item}", value)
        return out

    def describe(self, section: str, key: str, value: Any) -> tuple[str, bool]:
        """``(source text, explicitly set)`` of ``section.key`` whose resolved value is ``value``."""
        got = self.where.get((section, key))
        if got is None:
            return f"the default of [{section}]", False
        origin, raw = got
        if raw != value:  # a slime_configure implementation replaced what the user gave
            return f"a plugin's slime_configure (the config gave {raw!r} in {origin})", True
        return origin, True


# the driver checks again after late registrations (tests add in-memory plugins to a resolved
# manager) and still wants to say where each name came from
_SOURCES: weakref.WeakKeyDictionary[Any, Sources] = weakref.WeakKeyDictionary()


def remember_sources(config: Config, sources: Sources) -> None:
    _SOURCES[config] = sources


# -- plugins installed but not active ---------------------------------------------------------


@dataclass
class Inactive:
    """An installed plugin whose hooks do not run in this process, and why."""

    name: str
    why: str  # "not selected by --plugins", "autoload disabled", "disabled by ...", "failed: ..."
    plugin: Any  # the module (or object) its entry point names; None when it failed to import

    def hint(self, selected: list[str] | None) -> str:
        if self.why == "disabled by --disable-plugin":
            return f"installed, disabled: drop --disable-plugin {self.name}"
        if self.plugin is None:
            return f"installed, {self.why}"
        state = "not selected" if self.why == "not selected by --plugins" else self.why
        todo = f"add --plugins {','.join([*(selected or []), self.name])}"
        return f"installed, {state}: {todo}"


def inactive_plugins(manager: SlimePluginManager) -> Iterator[Inactive]:
    """Blocked and failed plugins of ``manager``, their modules imported (errors kept quiet:
    this only runs to explain an error)."""
    for info in manager.infos.values():
        if info.status in ("active", "unavailable"):
            continue
        plugin = None
        if info.status != "failed":
            try:
                plugin = _load_object(info.module)
            except Exception:  # noqa: BLE001 - a broken plugin just provides nothing here
                plugin = None
        why = (f"failed to load ({info.reason})" if info.status == "failed"
               else info.reason or info.status)
        yield Inactive(info.name, why, plugin)


def _load_object(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj


def _impl(plugin: Any, hook: str) -> Any:
    fn = getattr(plugin, hook, None)
    if fn is None or not callable(fn) or getattr(fn, PROJECT_NAME + "_impl", None) is None:
        return None
    return fn


def _call(fn: Any, **kwargs: Any) -> Any:
    """Call a hook implementation as pluggy does: only the arguments it names."""
    params = inspect.signature(fn).parameters
    try:
        return fn(**{k: v for k, v in kwargs.items() if k in params})
    except Exception:  # noqa: BLE001 - see inactive_plugins
        return None


def provided_by(manager: SlimePluginManager, record: type[Record],
                name: str | None) -> list[Inactive]:
    """Inactive plugins that register a ``record`` called ``name`` (any name: ``None``)."""
    found = []
    for plug in inactive_plugins(manager):
        fn = _impl(plug.plugin, record.hook) if plug.plugin is not None else None
        produced = _call(fn) if fn is not None else None
        if produced is None:
            continue
        items = [produced] if isinstance(produced, Record) else list(produced)
        if any(isinstance(r, record) and name in (None, r.name) for r in items):
            found.append(plug)
    return found


def _contributed(manager: SlimePluginManager) -> Iterator[tuple[Inactive, list[ConfigSection]]]:
    """Each inactive plugin with the config sections its ``slime_add_config`` returns."""
    from slime_core.config.schema import ConfigSchema

    for plug in inactive_plugins(manager):
        fn = _impl(plug.plugin, "slime_add_config") if plug.plugin is not None else None
        produced = _call(fn, schema=ConfigSchema()) if fn is not None else None
        if produced is None:
            continue
        items = [produced] if isinstance(produced, ConfigSection) else list(produced)
        yield plug, [s for s in items if isinstance(s, ConfigSection)]


def section_owners(manager: SlimePluginManager, section: str) -> list[Inactive]:
    """Inactive plugins whose ``slime_add_config`` contributes ``[section]``."""
    return [plug for plug, items in _contributed(manager)
            if any(s.name == section and not s.extends for s in items)]


def key_owners(manager: SlimePluginManager, section: str, key: str) -> list[Inactive]:
    """Inactive plugins whose ``slime_add_config`` extends ``[section]`` with ``key``."""
    return [plug for plug, items in _contributed(manager)
            if any(s.extends and s.name == section
                   and key in {f.name for f in dataclasses.fields(s.schema)} for s in items)]


def _provider_text(manager: SlimePluginManager, found: list[Inactive]) -> str:
    selected = manager.selection.plugins
    return "; ".join(f"plugin {p.name} ({p.hint(selected)})" for p in found)


# -- the checks -------------------------------------------------------------------------------


def check_sections(manager: SlimePluginManager, schema: ConfigSchema, sources: Sources) -> None:
    """A section the loaded plugins do not contribute, but an inactive plugin does, fails
    naming that plugin (``[ppo]`` without ``slime_ppo``). Other unknown sections are left to
    the loader, which suggests the nearest valid name."""
    known = set(schema.sections())
    for section, origin in sources.sections.items():
        if section in known:
            continue
        owners = section_owners(manager, section)
        if owners:
            raise ConfigError(
                f"config section [{section}] (in {origin}) belongs to "
                f"{_provider_text(manager, owners)}"
            )
    # a key an inactive plugin adds to a known section (algorithm.lam without slime_ppo)
    for (section, key), (origin, _) in sources.where.items():
        if section not in known or key in schema.keys(section):
            continue
        owners = key_owners(manager, section, key)
        if owners:
            raise ConfigError(
                f"config key {section}.{key} (in {origin}) belongs to "
                f"{_provider_text(manager, owners)}"
            )


def check_record_names(manager: SlimePluginManager, config: Config,
                       schema: ConfigSchema | None = None, sources: Sources | None = None) -> None:
    """Resolve every record name of ``config`` (see the module docstring); the first unknown
    one raises :class:`ConfigError`. ``schema`` defaults to the manager's sections."""
    if schema is None:
        schema = build_schema(manager)
    sources = sources or _SOURCES.get(config) or Sources()
    for section in schema.sections():
        keys = schema.get(section).record_keys
        if not keys or section not in config:
            continue
        values = config.section(section)
        defaults = _defaults(type(values))
        for key, spec in keys.items():
            value = getattr(values, key)
            source, explicit = sources.describe(section, key, value)
            registry = manager.registries.get(spec.record.kind)
            if len(registry) == 0 and value in spec.special:
                # "auto" picks among the records: with none registered it cannot; say which
                # inactive plugin registers some (a disabled default plugin, most likely)
                found = provided_by(manager, spec.record, None)
                if found:
                    raise ConfigError(
                        f"config {section}.{key} = {value!r} (from {source}): no "
                        f"{registry.label} is registered; {registry.label}s are provided by "
                        f"{_provider_text(manager, found)}")
            if not explicit and value == defaults.get(key) and len(registry) == 0:
                continue
            for name in value if isinstance(value, list) else [value]:
                _check_one(manager, registry, spec, f"{section}.{key}", name, value, source)


def _defaults(schema: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _check_one(manager: SlimePluginManager, registry: Any, spec: RecordKey, key: str,
               name: Any, value: Any, source: str) -> None:
    if (name == "" and spec.optional) or name in spec.special:
        return
    label = registry.label
    where = f"config {key} = {value!r} (from {source})"
    if name == "" and name not in registry:
        names = ", ".join(sorted(r.name for r in registry)) or "(none registered)"
        raise ConfigError(
            f"{where}: no {label} is named and no active plugin gives a default; set it to "
            f"one of: {names}")
    if name in registry:
        rec = registry.records[name]
        if spec.stage is not None and getattr(rec, "stage", spec.stage) != spec.stage:
            same = sorted(r.name for r in registry if getattr(r, "stage", None) == spec.stage)
            raise ConfigError(
                f"{where}: {label} {name!r} (plugin {rec.owner}) is a {rec.stage} filter; "
                f"{key} needs a {spec.stage} filter: {', '.join(same) or '(none registered)'}"
            )
        return
    choices = [r.name for r in registry
               if spec.stage is None or getattr(r, "stage", None) == spec.stage]
    extras = [*spec.special, *([""] if spec.optional else [])]
    listed = ", ".join(sorted(choices) + [repr(x) for x in extras]) or "(none registered)"
    close = difflib.get_close_matches(str(name), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    msg = f"{where}: unknown {label} {name!r}{hint}; available: {listed}"
    found = provided_by(manager, spec.record, str(name))
    if found:
        msg += f". {name!r} is provided by {_provider_text(manager, found)}"
    raise ConfigError(msg)
