"""``slime_rollout_engines_ready``: plugins get the engine clients as a hook argument, once per
rollout manager, in the manager's process; the deprecated global still answers, with a warning."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from slime_core.context import set_manager
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.rollout.engine_client import EngineClient
from slime_core.rollout.manager import RolloutManager
from slime_core.testing import build_test_config
from slime_hookspecs import hookimpl


class _Engine:
    def weight_version(self) -> int:
        return 0


def test_the_rollout_manager_hands_its_clients_to_plugins(tmp_path: Path) -> None:
    seen: list[tuple[Any, list[Any]]] = []

    class Server:
        @hookimpl
        def slime_rollout_engines_ready(self, config: Any, clients: list[Any]) -> None:
            seen.append((config, clients))

    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    manager.register_object(Server(), "engine_server")
    set_manager(manager)
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "a", "label": "1"}\n')
    config = build_test_config(data={"path": str(data)}, rollout={"reward": "exact"})
    source = manager.registries.data_source.get("jsonl").factory(config, "train")
    engines = [_Engine(), _Engine()]
    rollouts = RolloutManager(config, engines, source, None)

    assert len(seen) == 1
    got_config, clients = seen[0]
    assert got_config is config and clients == rollouts.clients
    assert all(isinstance(c, EngineClient) for c in clients)
    assert [c.engine for c in clients] == engines and [c.index for c in clients] == [0, 1]

    from slime_core import api

    with pytest.deprecated_call(match="slime_rollout_engines_ready"):
        assert api.rollout_engine_clients() == clients


def test_no_first_party_code_reads_the_deprecated_global() -> None:
    repo = Path(__file__).resolve().parents[3]
    definer = repo / "core/slime_core/context.py"
    readers = [
        str(p.relative_to(repo))
        for top in ("core/slime_core", "plugins")
        for p in (repo / top).rglob("*.py")
        if "tests" not in p.parts and p != definer
        and re.search(r"rollout_engine_clients\(\)", p.read_text())
    ]
    assert readers == [], "read the clients from slime_rollout_engines_ready instead"
