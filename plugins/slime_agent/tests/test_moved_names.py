"""The core API's name for the agent API forwards to slime-agent's for one minor version."""

from __future__ import annotations

import pytest


def test_the_core_api_name_forwards_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import slime_agent.buffer.services as services
    from slime_core import api

    server = object()
    monkeypatch.setattr(services, "run_agent_api", lambda config: server)
    with pytest.deprecated_call(match="slime_agent.run_agent_api"):
        assert api.run_agent_api(None) is server
    assert __import__("slime_agent").run_agent_api(None) is server
