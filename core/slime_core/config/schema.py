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

    def add(self, section: ConfigSection) -> None:
        if not dataclasses.is_dataclass(section.schema):
            raise TypeError(
                f"config section {section.name!r} of plugin {section.owner!r}: schema must be a "
                f"dataclass type, got {section.schema!r}"
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
        if name not in self._sections:
            raise ConfigError(_unknown("section", name, list(self._sections)))
        return self._sections[name]

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
        produced = impl.function(schema=schema)
        if produced is None:
            continue
        for sec in [produced] if isinstance(produced, ConfigSection) else produced:
            sec.owner = owner
            schema.add(sec)
    return schema
