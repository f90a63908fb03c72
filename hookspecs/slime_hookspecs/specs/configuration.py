"""Configuration and CLI hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slime_hookspecs.markers import hookspec

if TYPE_CHECKING:
    from slime_hookspecs.config import Config
    from slime_hookspecs.records import ConfigSection


@hookspec(historic=True)
def slime_add_config(schema: Any) -> ConfigSection | list[ConfigSection] | None:
    """Contribute typed configuration sections.

    **When**: while the config schema is built, before any TOML is read; historic, so a plugin
    registered later still contributes.
    **Process**: every process that builds a config (driver; workers receive it resolved).
    **Args**: ``schema`` -- the schema being built; ``schema.sections()`` lists names taken.
    **Returns**: :class:`~slime_hookspecs.records.ConfigSection` (or a list): the TOML table
    name and a dataclass type whose annotated fields are the keys, with defaults. A section name
    already taken fails naming both owners, unless the new one sets ``extends=True``: then its
    keys join the existing section (see :class:`~slime_hookspecs.records.ConfigSection`).

    .. versionadded:: 0.1
    """


@hookspec(historic=True)
def slime_configure(config: Config) -> None:
    """Inspect or adjust the resolved config; raise ``ValueError`` to reject it.

    **When**: after the TOML file and ``-o`` overrides are merged and typed, before any
    component is built; historic.
    **Process**: the driver (workers receive the config it produced); while a config is
    resolved, ``slime_core.api.get_registries()`` answers with that run's records.
    **Args**: ``config`` -- the resolved :class:`slime_core.config.Config`; sections are
    attributes (``config.rollout.temperature``). A plugin that changes a choice the config
    names points the key at its own record here (``slime_core.api.replace_choice``).
    **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec(historic=True)
def slime_register_commands(cli: Any) -> None:
    """Add sub-commands to the ``core`` CLI.

    **When**: when ``core`` starts, before arguments are parsed; historic.
    **Process**: the CLI process.
    **Args**: ``cli`` -- the root ``click.Group``; call ``cli.add_command(...)``. Keep imports
    inside the command function so ``core --help`` stays fast.
    **Returns**: nothing.

    .. versionadded:: 0.1
    """
