"""The pluggy markers of the ``slime`` project.

A plugin decorates its implementations with :data:`hookimpl`; the specifications in
:mod:`slime_hookspecs.specs` are decorated with :data:`hookspec`.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "slime"
"""pluggy project name, marker namespace and entry-point group."""

ENTRY_POINT_GROUP = PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
