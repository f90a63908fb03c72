"""Built-in plugin ``core_config``: registers the core's configuration sections
(:mod:`slime_core.config.sections`)."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import ConfigSection, hookimpl

from slime_core.config.sections import RECORD_KEYS, SECTIONS


@hookimpl
def slime_add_config(schema: Any) -> list[ConfigSection]:
    return [ConfigSection(name=n, schema=s, summary=doc, record_keys=RECORD_KEYS.get(n, {}))
            for n, s, doc in SECTIONS]
