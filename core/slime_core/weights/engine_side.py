"""The engine side of a weight transport: its part that runs in the engine's process.

A :class:`~slime_hookspecs.WeightTransportRecord` may give ``engine_side(config, engine) ->
object``. The trainer side (the object its ``factory`` built) reaches that object's methods
through :func:`call_engine_side`, whatever the executor:

* an engine of the local executor lives in the caller's process: the object is built here,
  once per engine and transport, and called directly;
* a Ray engine actor (:class:`~slime_core.executors.ray_workers.RemoteEngine`) has one
  generic entry, ``weight_transport_call(transport, method, *args)``: the actor looks the
  record up in its own registry (it loaded the run's plugins, ``run.plugin_modules``
  included), builds the object once and calls it there. So a third-party transport has an
  engine side under Ray too; the core knows no transport by name.
"""

from __future__ import annotations

import weakref
from typing import Any

# engine -> {transport name -> its engine side}: the local executor's engines (this process)
_local: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def build_engine_side(registries: Any, config: Any, engine: Any, transport: str) -> Any:
    """The engine side of the weight transport record ``transport`` for ``engine``."""
    rec = registries.weight_transport.get(transport)
    if rec.engine_side is None:
        raise RuntimeError(
            f"weight transport {transport!r} (plugin {rec.owner or '?'}) has no engine side: "
            "its WeightTransportRecord gives no engine_side(config, engine), so its trainer "
            "side cannot call one"
        )
    return rec.engine_side(config, engine)


def call_engine_side(config: Any, engine: Any, transport: str, method: str,
                     *args: Any) -> Any:
    """``method(*args)`` of transport ``transport``'s engine side for ``engine``, run in the
    engine's process (the engine actor under the ray executor); its result. Arguments and
    result must be picklable when the engine is an actor."""
    remote = getattr(engine, "weight_transport_call", None)
    if remote is not None:
        return remote(transport, method, *args)
    from slime_core.context import get_registries

    try:
        sides = _local.setdefault(engine, {})
    except TypeError:  # not weak-referenceable: a fresh engine side for each call
        sides = {}
    side = sides.get(transport)
    if side is None:
        side = sides[transport] = build_engine_side(get_registries(), config, engine, transport)
    return getattr(side, method)(*args)
