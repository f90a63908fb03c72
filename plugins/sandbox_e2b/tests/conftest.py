from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# tests run with --import-mode=importlib: load the stand-in server by path
_spec = importlib.util.spec_from_file_location("e2b_standin", Path(__file__).with_name("standin.py"))
standin = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules["e2b_standin"] = standin
_spec.loader.exec_module(standin)  # type: ignore[union-attr]

KEY_ENV = "SLIME_TEST_E2B_KEY"


@pytest.fixture
def server(monkeypatch):
    srv = standin.StandIn(api_key="e2b_test_key").start()
    monkeypatch.setenv(KEY_ENV, srv.api_key)
    yield srv
    srv.stop()


@pytest.fixture
def options(server):
    from sandbox_e2b.config import E2BSection

    def make(**kw):
        return E2BSection(api_url=server.url, sandbox_url=server.url, api_key_env=KEY_ENV,
                          request_timeout_s=30, **kw)

    return make
