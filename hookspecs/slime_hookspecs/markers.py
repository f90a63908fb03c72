"""The pluggy markers of the ``slime`` project.

A plugin decorates its implementations with :data:`hookimpl`; the specifications in
:mod:`slime_hookspecs.specs` are decorated with :data:`hookspec`.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "slime"
"""pluggy project name, marker namespace and entry-point group."""

ENTRY_POINT_GROUP = PROJECT_NAME

DEFAULT_ENTRY_POINT_GROUP = PROJECT_NAME + ".defaults"
"""Entry-point group of default plugins: loaded in every process whatever ``--plugins``
selects and with autoload off (as pytest's default plugins), unless ``--disable-plugin``
names one. slime-std ships the built-in records (local engine, torch trainer, rewards, ...)
this way, so a user can turn one off and register a replacement."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
