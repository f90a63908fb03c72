"""The ``wandb`` logger record: unavailable with its reason when wandb is missing; offline
logging without any network when it is installed (WANDB_MODE=offline)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.pluginmgr.registry import UnavailableRecordError

HAVE_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.mark.skipif(HAVE_WANDB, reason="wandb is installed: the offline test covers it")
def test_wandb_record_is_unavailable_with_its_reason() -> None:
    manager = SlimePluginManager(PluginSelection(plugins=[])).load()
    rec = manager.registries.logger.get("wandb", require_available=False)
    assert rec.owner == "core_loggers"
    assert rec.unavailable_reason() == "wandb is not installed (pip install wandb)"
    with pytest.raises(UnavailableRecordError,
                       match="'wandb' \\(plugin core_loggers\\) is unavailable: wandb is not installed"):
        manager.registries.logger.get("wandb")


@pytest.mark.skipif(not HAVE_WANDB, reason="wandb is not installed (pip install wandb)")
def test_wandb_offline_logs_without_network(make_config, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from slime_std.observe.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login either
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # any server call would fail
    monkeypatch.setenv("WANDB_SILENT", "true")
    manager = SlimePluginManager(PluginSelection(plugins=[])).load()
    assert manager.registries.logger.get("wandb").factory is WandbLogger
    logger = WandbLogger(make_config(run={"name": "offline-test"}), str(tmp_path))
    logger.log({"train/loss_offline_probe": 0.125, "rollout/reward_mean": 1.0}, 1)
    logger.close()
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    (data,) = run.glob("run-*.wandb")
    # the offline record log stores metric names as plain strings; wandb's service process
    # may still be flushing it when finish() returns, so give it a few seconds
    deadline = time.monotonic() + 20
    while b"train/loss_offline_probe" not in data.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.2)
    raw = data.read_bytes()
    assert b"train/loss_offline_probe" in raw and b"offline-test" in raw
