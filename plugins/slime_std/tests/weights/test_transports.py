"""The transports of ``core_weights`` and the engine-side mechanism, without Ray: the pure
checks of the Ray-only transports, and ``call_engine_side`` on engines of this process."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from slime_core.api import call_engine_side
from slime_core.pluginmgr import SlimePluginManager
from slime_core.testing import build_test_config
from slime_hookspecs import WeightTransportRecord, hookimpl
from slime_std.weights.broadcast import check_reachable
from slime_std.weights.ray_store import RayObjectTransport


def test_broadcast_refuses_a_loopback_store_across_machines() -> None:
    check_reachable("127.0.0.1", "127.0.0.1", ["127.0.0.1", "127.0.0.1"])  # raylets of one box
    check_reachable("10.0.0.1", "10.0.0.1", ["10.0.0.2"])  # a routable store
    with pytest.raises(RuntimeError, match="engines on 10.0.0.2 cannot reach .* ray.dist_host"):
        check_reachable("127.0.0.1", "10.0.0.1", ["10.0.0.1", "10.0.0.2"])


def test_local_executor_refuses_ray_transports() -> None:
    cfg = build_test_config(weights={"transport": "ray"})
    with pytest.raises(RuntimeError, match="needs run.executor = 'ray'"):
        RayObjectTransport(cfg).send({"w": torch.zeros(1)}, 0, [object()])


class _Side:
    built: list[Any] = []

    def __init__(self, config: Any, engine: Any) -> None:
        self.engine, self.calls = engine, 0
        _Side.built.append(engine)

    def load(self, value: float, version: int) -> int:
        self.calls += 1
        self.engine.update_weights({"w": torch.full((1,), value)}, version)
        return self.calls


class _Engine:
    def __init__(self) -> None:
        self.got: list[tuple[float, int]] = []

    def update_weights(self, weights: dict[str, Any], version: int) -> None:
        self.got.append((float(weights["w"]), version))


class _Plugin:
    @hookimpl
    def slime_register_weight_transports(self) -> list[WeightTransportRecord]:
        return [WeightTransportRecord(name="side", factory=lambda c, a=None: None,
                                      engine_side=_Side),
                WeightTransportRecord(name="plain", factory=lambda c, a=None: None)]


def test_call_engine_side_builds_one_side_per_engine_in_this_process(monkeypatch) -> None:
    from slime_core.pluginmgr import PluginSelection

    manager = SlimePluginManager(PluginSelection(plugins=[])).load()
    manager.register_object(_Plugin(), "side_plugin")
    monkeypatch.setattr("slime_core.context._MANAGER", manager)
    cfg = build_test_config()
    a, b = _Engine(), _Engine()
    _Side.built.clear()
    assert call_engine_side(cfg, a, "side", "load", 1.0, 1) == 1
    assert call_engine_side(cfg, a, "side", "load", 2.0, 2) == 2  # the same side object
    assert call_engine_side(cfg, b, "side", "load", 3.0, 2) == 1
    assert a.got == [(1.0, 1), (2.0, 2)] and b.got == [(3.0, 2)]
    assert _Side.built == [a, b]
    with pytest.raises(RuntimeError, match="'plain' .plugin side_plugin. has no engine side"):
        call_engine_side(cfg, a, "plain", "load", 1.0, 1)
