"""The config schema: named dataclass sections and their type checking."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import TYPE_CHECKING, Any, Literal, Union

from slime_hookspecs.records import ConfigSection

from slime_core.config.model import ConfigError

if TYPE_CHECKING:
    from slime_core.pluginmgr.manager import SlimePluginManager


class ConfigSchema:
    """Sections by name; built from ``slime_add_config`` (a historic hook)."""

    def __init__(self) -> None:
        self._sections: dict[str, ConfigSection] = {}
        self._extensions: dict[str, list[ConfigSection]] = {}

    def add(self, section: ConfigSection) -> None:
        if not dataclasses.is_dataclass(section.schema):
            raise TypeError(
                f"config section {section.name!r} of plugin {section.owner!r}: schema must be a "
                f"dataclass type, got {section.schema!r}"
            )
        if section.extends:
            self._extensions.setdefault(section.name, []).append(section)
            return
        if section.defaults:
            raise ConfigError(
                f"config section [{section.name}] of plugin {section.owner!r}: defaults are for "
                "extensions (extends=True); give the fields their defaults instead"
            )
        if section.name in self._sections:
            other = self._sections[section.name]
            raise ConfigError(
                f"config section [{section.name}] is contributed by both plugin "
                f"{other.owner!r} and plugin {section.owner!r}"
            )
        self._sections[section.name] = section

    def sections(self) -> list[str]:
        return list(self._sections)

    def get(self, name: str) -> ConfigSection:
        """Section ``name`` with the keys of every extension merged in."""
        if name not in self._sections:
            raise ConfigError(_unknown("section", name, list(self._sections)))
        return merge_section(self._sections[name], self._extensions.get(name, []))

    def check_extensions(self) -> None:
        """Every extension extends a section some loaded plugin contributes."""
        for name, parts in self._extensions.items():
            if name not in self._sections:
                owners = ", ".join(repr(p.owner) for p in parts)
                raise ConfigError(
                    f"plugin {owners} extends config section [{name}], which no loaded plugin "
                    f"contributes (sections: {', '.join(sorted(self._sections))})")
            self.get(name)

    def parts(self, name: str) -> list[ConfigSection]:
        """The section as its owner contributes it, then each extension of it."""
        self.get(name)
        return [self._sections[name], *self._extensions.get(name, [])]

    def owner_of(self, name: str, key: str) -> str | None:
        """The plugin that contributed ``name.key`` (an extension's owner for its keys)."""
        for part in self._extensions.get(name, []):
            if key in {f.name for f in dataclasses.fields(part.schema)}:
                return part.owner
        return self._sections[name].owner if name in self._sections else None

    def keys(self, name: str) -> dict[str, Any]:
        """Field name -> resolved type of a section."""
        return typing.get_type_hints(self.get(name).schema)

    def build(self, name: str, values: dict[str, Any]) -> Any:
        """Instantiate section ``name`` from a dict, checking every key and type."""
        sec = self.get(name)
        hints = typing.get_type_hints(sec.schema)
        fields = {f.name for f in dataclasses.fields(sec.schema)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key not in fields:
                raise ConfigError(_unknown("key", f"{name}.{key}", [f"{name}.{f}" for f in fields]))
            kwargs[key] = check_type(f"{name}.{key}", value, hints[key])
        try:
            obj = sec.schema(**kwargs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"[{name}]: {exc}") from exc
        return obj


def _unknown(what: str, name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown config {what} {name!r}{hint} (valid: {', '.join(sorted(valid))})"


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "None"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def check_type(key: str, value: Any, tp: Any) -> Any:
    """Return ``value`` converted to ``tp`` where lossless (int -> float), else raise."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        errors = []
        for arg in args:
            try:
                return check_type(key, value, arg)
            except ConfigError as exc:
                errors.append(exc)
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: expected one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
        inner = args[0] if args else Any
        return [check_type(f"{key}[{i}]", v, inner) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table ({_type_name(tp)}), got {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): check_type(f"{key}.{k}", v, vt) for k, v in value.items()}
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{key}: expected None, got {value!r}")
        return None
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected float, got {value!r} ({type(value).__name__})")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected int, got {value!r} ({type(value).__name__})")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected bool, got {value!r} ({type(value).__name__})")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected str, got {value!r} ({type(value).__name__})")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
    return value


def build_schema(manager: SlimePluginManager) -> ConfigSchema:
    """Collect ``slime_add_config`` sections, each tagged with its owner plugin."""
    schema = ConfigSchema()
    for impl in manager.pluggy.hook.slime_add_config.get_hookimpls():
        owner = manager.plugin_name(impl.plugin)
        produced: Any = impl.function(schema=schema)
        if produced is None:
            continue
        for sec in [produced] if isinstance(produced, ConfigSection) else produced:
            sec.owner = owner
            schema.add(sec)
    schema.check_extensions()
    return schema


def merge_section(base: ConfigSection, parts: list[ConfigSection]) -> ConfigSection:
    """``base`` with the keys, defaults, presets, record keys and checks of its extensions.

    The merged schema is a dataclass subclass of ``base.schema`` (so ``isinstance`` and the
    base's methods hold) that declares every field again, in order: the base's, then each
    extension's. Its ``__post_init__`` runs the base's check, then each part's."""
    if not parts:
        return base
    cache_key = _merge_key(base, parts)
    if cache_key in _MERGED:
        cls, keys = _MERGED[cache_key]
        return dataclasses.replace(base, schema=cls, record_keys=keys)
    hints = typing.get_type_hints(base.schema)
    base_keys = {f.name for f in dataclasses.fields(base.schema)}
    owner: dict[str, str | None] = dict.fromkeys(base_keys, base.owner)
    defaults: dict[str, tuple[Any, str | None]] = {}
    specs: list[tuple[str, Any, Any]] = []
    checks = [base.schema] + [p.schema for p in parts]
    presets = {k: dict(v) for k, v in (getattr(base.schema, "NUMERICS_PRESETS", None) or {}).items()}
    record_keys = dict(base.record_keys)
    for part in parts:
        part_hints = typing.get_type_hints(part.schema)
        for f in dataclasses.fields(part.schema):
            if f.name in owner:
                raise ConfigError(
                    f"config key {base.name}.{f.name} is contributed by both plugin "
                    f"{owner[f.name]!r} and plugin {part.owner!r}")
            owner[f.name] = part.owner
            hints[f.name] = part_hints[f.name]
        for key, value in part.defaults.items():
            if key not in base_keys:
                raise ConfigError(
                    f"plugin {part.owner!r} gives a default to {base.name}.{key}, which is not "
                    f"a key of [{base.name}] as plugin {base.owner!r} contributes it")
            if key in defaults and defaults[key][0] != value:
                raise ConfigError(
                    f"config key {base.name}.{key}: plugin {defaults[key][1]!r} makes "
                    f"{defaults[key][0]!r} its default and plugin {part.owner!r} {value!r}; set "
                    "it in the config")
            defaults[key] = (value, part.owner)
        for preset, values in (getattr(part.schema, "NUMERICS_PRESETS", None) or {}).items():
            presets.setdefault(preset, {}).update(values)
        record_keys.update(part.record_keys)
    for cls in checks:
        for f in dataclasses.fields(cls):
            if f.name in defaults:
                spec = dataclasses.field(default=defaults[f.name][0])
            elif f.default_factory is not dataclasses.MISSING:
                spec = dataclasses.field(default_factory=f.default_factory)
            else:
                spec = dataclasses.field(default=f.default)
            specs.append((f.name, hints[f.name], spec))

    def __post_init__(self: Any) -> None:
        for cls in checks:
            check = cls.__dict__.get("__post_init__")
            if check is not None:
                check(self)

    def __reduce__(self: Any) -> tuple[Any, ...]:
        # the class is made at run time: a worker rebuilds it from the same parts
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return _restore, (base, parts, values)

    namespace = {"__post_init__": __post_init__, "__reduce__": __reduce__,
                 "__module__": base.schema.__module__, "__qualname__": base.schema.__qualname__}
    if presets:
        namespace["NUMERICS_PRESETS"] = presets
    merged = dataclasses.make_dataclass(base.schema.__name__, specs, bases=(base.schema,),
                                        namespace=namespace)
    _MERGED[cache_key] = (merged, record_keys)
    return dataclasses.replace(base, schema=merged, record_keys=record_keys)


# one merged class per set of parts in a process, so every copy of a section has one type
_MERGED: dict[tuple[Any, ...], tuple[type, dict[str, Any]]] = {}


def _merge_key(base: ConfigSection, parts: list[ConfigSection]) -> tuple[Any, ...]:
    return (base.name, base.schema, base.owner,
            *((p.schema, p.owner, repr(sorted(p.defaults.items()))) for p in parts))


def _restore(base: ConfigSection, parts: list[ConfigSection], values: dict[str, Any]) -> Any:
    """Unpickle a merged section: the same values, without running the checks again."""
    cls: Any = merge_section(base, parts).schema
    obj = cls.__new__(cls)
    obj.__dict__.update(values)
    return obj
