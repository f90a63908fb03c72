"""A plugin takes over a choice the config names, keeping the user's choice to build on.

The rule "if the config names it, it is a record" leaves a plugin that must change what a
run uses (slime_compat's ``[slime].custom_rm_path``, slime_agent's episode rewards) one way
to do it: register a record and point the config key at it in ``slime_configure``, as
``core_observe`` switches ``rollout.engine`` to ``replay``. :func:`replace_choice` does that
and remembers what the user had chosen; the plugin's record asks :func:`replaced_choice` for
it when it builds on it (a filter ANDed with the user's, a reward used when the plugin has
none). The remembered choice travels with the config to other processes (it is pickled
with it) and into the configs derived from it (evaluation datasets, the OPD teacher).
"""

from __future__ import annotations

from typing import Any


def replace_choice(config: Any, key: str, name: str) -> str:
    """Set ``key`` (``"rollout.reward"``) to ``name`` and return what it was before the first
    replacement (``""`` when nothing was chosen); calling it again with the same name changes
    nothing."""
    section, _, attr = key.partition(".")
    if not attr:
        raise ValueError(f"replace_choice: {key!r} is not a 'section.key' name")
    sec = config.section(section)
    replaced = _replaced(config)
    current = getattr(sec, attr)
    if current != name:
        replaced.setdefault(key, current)
        setattr(sec, attr, name)
    return replaced.get(key, "")


def replaced_choice(config: Any, key: str) -> str | None:
    """What the user chose for ``key`` before a plugin's :func:`replace_choice` (``""``: no
    choice); ``None`` when no plugin replaced it."""
    replaced = vars(config).get("_replaced")
    return None if replaced is None else replaced.get(key)


def _replaced(config: Any) -> dict[str, str]:
    state = vars(config)
    if "_replaced" not in state:
        state["_replaced"] = {}
    return state["_replaced"]
