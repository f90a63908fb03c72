"""Registries: name -> record, built from the ``slime_register_*`` hooks.

Each registration implementation is called individually so every record knows its owner
plugin; a name registered twice fails naming both owners, an unknown name fails listing the
valid choices, an unavailable record fails with its probe's reason.
"""

from __future__ import annotations

import difflib
import weakref
from typing import TYPE_CHECKING, Any, Iterator

from slime_hookspecs.records import RECORD_TYPES, Record

if TYPE_CHECKING:
    import pluggy


# kind -> (hook name, human label, record type); the hook name is the record type's own
KINDS: dict[str, tuple[str, str, type[Record]]] = {
    rt.kind: (rt.hook, rt.kind.replace("_", " "), rt) for rt in RECORD_TYPES
}


class DuplicateRecordError(ValueError):
    pass


class UnknownRecordError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class UnavailableRecordError(RuntimeError):
    pass


class Registry:
    """Records of one kind, by name."""

    def __init__(self, kind: str, records: dict[str, Record]) -> None:
        self.kind = kind
        self.label = KINDS[kind][1]
        self.records = records
        # name -> (config, weak reference to the key object or None, product): see built()
        self._products: dict[str, tuple[Any, Any, Any]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.records

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records.values())

    def __len__(self) -> int:
        return len(self.records)

    def names(self) -> list[str]:
        return sorted(self.records)

    def get(self, name: str, *, require_available: bool = True) -> Any:
        """The record called ``name``; unknown or unavailable names fail with a clear message."""
        rec = self.records.get(name)
        if rec is None:
            choices = self.names()
            close = difflib.get_close_matches(str(name), choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownRecordError(
                f"unknown {self.label} {name!r}{hint}; choose one of: "
                f"{', '.join(choices) if choices else '(none registered: install a plugin that provides one)'}"
            )
        if require_available:
            why = rec.unavailable_reason()
            if why:
                raise UnavailableRecordError(
                    f"{self.label} {name!r} (plugin {rec.owner}) is unavailable: {why}"
                )
        return rec


    def built(self, name: str, config: Any, *args: Any, key: Any = None) -> Any:
        """``get(name).factory(config, *args)``, made once and kept while ``config`` (and
        ``key``, when given: e.g. the batch a loss reducer was made for) stay the same
        objects: a record's product is built once per run (or per batch), not at every step
        or micro-batch. A config edited in place keeps the product made before the edit."""
        cached = self._products.get(name)
        if cached is not None and cached[0] is config and (
                key is None if cached[1] is None else cached[1]() is key):
            return cached[2]
        product = self.get(name).factory(config, *args)
        self._products[name] = (config, None if key is None else weakref.ref(key), product)
        return product


class Registries:
    """All registries of a plugin manager, built lazily per kind."""

    def __init__(self, pluggy_manager: pluggy.PluginManager) -> None:
        """``pluggy_manager``: the plugin manager's pluggy manager, whose registration hooks are called."""
        self._pluggy = pluggy_manager
        self._built: dict[str, Registry] = {}

    def __getattr__(self, kind: str) -> Registry:
        if kind.startswith("_") or kind not in KINDS:
            raise AttributeError(kind)
        return self.get(kind)

    def get(self, kind: str) -> Registry:
        if kind not in self._built:
            self._built[kind] = self._build(kind)
        return self._built[kind]

    def all(self) -> dict[str, Registry]:
        return {k: self.get(k) for k in KINDS}

    def by_owner(self, plugin_name: str) -> dict[str, list[Record]]:
        out: dict[str, list[Record]] = {}
        for kind, reg in self.all().items():
            recs = [r for r in reg if r.owner == plugin_name]
            if recs:
                out[kind] = recs
        return out

    def _build(self, kind: str) -> Registry:
        hook_name, label, rtype = KINDS[kind]
        caller = getattr(self._pluggy.hook, hook_name)
        records: dict[str, Record] = {}
        # get_hookimpls() is in registration order: built-ins first, so their names win ties
        # only by being reported as the first owner in a duplicate error.
        for impl in caller.get_hookimpls():
            owner = self._pluggy.get_name(impl.plugin) or repr(impl.plugin)
            produced = impl.function()
            if produced is None:
                continue
            items = [produced] if isinstance(produced, Record) else list(produced)
            for rec in items:
                if not isinstance(rec, rtype):
                    raise TypeError(
                        f"plugin {owner!r}: {hook_name} returned {type(rec).__name__}, "
                        f"expected {rtype.__name__}"
                    )
                rec.owner = owner
                if rec.name in records:
                    raise DuplicateRecordError(
                        f"{label} {rec.name!r} is registered by both plugin "
                        f"{records[rec.name].owner!r} and plugin {owner!r}"
                    )
                records[rec.name] = rec
        return Registry(kind, records)
