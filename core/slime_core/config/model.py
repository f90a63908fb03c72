"""The resolved ``Config``: sections as attributes, picklable, serialisable."""

from __future__ import annotations

import dataclasses
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value, naming the key, what was expected and what was given."""


class Config:
    """Resolved run configuration; ``config.rollout.temperature`` style access."""

    def __init__(self, sections: dict[str, Any], source: str | None = None,
                 replaced: dict[str, str] | None = None) -> None:
        self._sections = dict(sections)
        self._source = source
        # key -> the user's choice a plugin replaced (slime_core.config.choices)
        self._replaced = dict(replaced or {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._sections[name]
        except KeyError:
            raise AttributeError(
                f"config has no section {name!r}; sections: {', '.join(sorted(self._sections))}"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name in self._sections

    def section(self, name: str) -> Any:
        return getattr(self, name)

    def sections(self) -> list[str]:
        return list(self._sections)

    @property
    def source(self) -> str | None:
        """Path of the TOML file the config was read from, if any."""
        return self._source

    def get(self, dotted: str) -> Any:
        section, _, key = dotted.partition(".")
        return getattr(self.section(section), key)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dataclasses.asdict(sec) for name, sec in self._sections.items()}

    def __repr__(self) -> str:
        return f"Config({', '.join(self._sections)})"
