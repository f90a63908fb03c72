"""The core API's name for the agent API forwards to slime-agent's for one minor version,
found through the loaded plugin (the core imports no plugin)."""

from __future__ import annotations

import pytest


def test_the_core_api_name_forwards_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import slime_agent.buffer.services as services
    from slime_core import api, context
    from slime_core.pluginmgr import SlimePluginManager

    monkeypatch.setattr(context, "_MANAGER", SlimePluginManager().load())
    server = object()
    monkeypatch.setattr(services, "run_agent_api", lambda config: server)
    with pytest.deprecated_call(match="slime_agent.run_agent_api"):
        assert api.run_agent_api(None) is server
    assert __import__("slime_agent").run_agent_api(None) is server


def test_without_slime_agent_loaded_the_error_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from slime_core import api, context
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    manager = SlimePluginManager(PluginSelection(plugins=[])).load()
    monkeypatch.setattr(context, "_MANAGER", manager)
    with pytest.deprecated_call(), pytest.raises(RuntimeError, match="pip install slime-agent"):
        api.run_agent_api(None)
