"""Read a TOML run file, apply ``-o section.key=value`` overrides, build typed sections."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

from slime_core.config.model import Config, ConfigError
from slime_core.config.schema import ConfigSchema

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def parse_override(text: str) -> tuple[str, str, Any]:
    """``"rollout.n_samples_per_prompt=8"`` -> ``("rollout", "n_samples_per_prompt", 8)``.

    The value is parsed as a TOML value (numbers, booleans, arrays, quoted strings); anything
    that is not valid TOML is taken as a bare string.
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    dotted, _, raw = text.partition("=")
    section, _, key = dotted.strip().partition(".")
    if not section or not key:
        raise ConfigError(f"override {text!r} must name section.key (e.g. rollout.temperature=0.7)")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from exc


def load_config(
    schema: ConfigSchema,
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    data: dict[str, Any] | None = None,
) -> Config:
    """Merge file (or ``data``) and overrides, then type-check every section of ``schema``."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_toml(path)
    if data:
        for sec, values in data.items():
            raw.setdefault(sec, {}).update(values)
    overridden: dict[str, str] = {}  # "section.key" -> the -o item that set it
    for item in overrides:
        sec, key, value = parse_override(item)
        table = raw.setdefault(sec, {})
        if not isinstance(table, dict):
            raise ConfigError(f"override -o {item}: [{sec}] is not a table")
        table[key] = value
        overridden[f"{sec}.{key}"] = item
    where = f" in {path}" if path else ""
    for name, values in raw.items():
        if not isinstance(values, dict):
            raise ConfigError(f"top-level key {name!r}{where} must be a [section] table")
        try:
            schema.get(name)  # unknown section -> nearest valid name
        except ConfigError as exc:
            raise ConfigError(f"{exc}{_source(str(exc), overridden, where, section=name)}") from exc
    presets = _numerics_presets(schema, raw)
    sections = {}
    for name in schema.sections():
        try:
            sections[name] = schema.build(name, {**presets.get(name, {}), **raw.get(name, {})})
        except ConfigError as exc:
            raise ConfigError(f"{exc}{_source(str(exc), overridden, where)}") from exc
    return Config(sections, source=str(path) if path else None)


def _numerics_presets(schema: ConfigSchema, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Section -> the key defaults of the ``algorithm.numerics`` preset the config selects.

    A section dataclass opts in with a ``NUMERICS_PRESETS`` class attribute
    (``{preset: {key: value}}``, not a field). Keys the config sets itself are applied on top, so
    ``-o algorithm.numerics=verl -o algorithm.eps_clip_c=0`` keeps verl's conventions but the
    dual clip off. An unknown preset selects nothing here; the ``[algorithm]`` section refuses it.
    """
    if "algorithm" not in schema.sections():
        return {}
    preset = raw.get("algorithm", {}).get("numerics")
    if preset is None:
        fields = {f.name: f for f in dataclasses.fields(schema.get("algorithm").schema)}
        if "numerics" not in fields:
            return {}
        preset = fields["numerics"].default
    out: dict[str, dict[str, Any]] = {}
    for name in schema.sections():
        table = getattr(schema.get(name).schema, "NUMERICS_PRESETS", None) or {}
        if isinstance(preset, str) and preset in table:
            out[name] = dict(table[preset])
    return out


def _source(message: str, overridden: dict[str, str], where: str, section: str | None = None) -> str:
    """Where the key an error names came from: its ``-o`` override, else the file.

    The key the error is about comes first in its message (quoted, or before the colon); the
    "did you mean" and "valid:" lists after it name keys that are not at fault, so only the
    message's head is searched, then the section for errors that name no key."""
    head = re.split(r"; did you mean|\(valid:", message, maxsplit=1)[0]
    for dotted, item in overridden.items():
        if re.search(rf"(?<![\w.]){re.escape(dotted)}(?![\w.])", head):
            return f" (from the override -o {item})"
    for dotted, item in overridden.items():
        if dotted.partition(".")[0] == section:
            return f" (from the override -o {item})"
    return where
