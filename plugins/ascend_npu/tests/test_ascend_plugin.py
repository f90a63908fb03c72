"""The ascend_npu plugin on a host without Ascend: loads, reports why it is unavailable."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slime_core.pluginmgr import PluginSelection, SlimePluginManager, UnavailableRecordError


def test_registers_npu_record_with_its_placement_fields() -> None:
    m = SlimePluginManager(PluginSelection(plugins=["ascend_npu"])).load()
    rec = m.registries.accelerator.get("npu", require_available=False)
    assert (rec.device_type, rec.dist_backend, rec.ray_resource) == ("npu", "hccl", "NPU")
    assert rec.visible_devices_env == "ASCEND_RT_VISIBLE_DEVICES"
    assert rec.extra["ray_env"] == {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}
    assert rec.unavailable_reason().startswith("torch_npu is not installed")
    with pytest.raises(UnavailableRecordError, match="accelerator 'npu' .* unavailable: torch_npu is not installed"):
        m.registries.accelerator.get("npu")
    with pytest.raises(RuntimeError, match="torch_npu is not installed"):
        rec.factory()


def test_auto_never_picks_an_unavailable_npu() -> None:
    from slime_core.runtime.accelerator import select_accelerator

    m = SlimePluginManager(PluginSelection(plugins=["ascend_npu"])).load()
    assert select_accelerator(m, "auto").name == "cpu"


def test_cli_lists_it_unavailable_and_check_passes() -> None:
    out = subprocess.run([sys.executable, "-m", "slime_core", "plugins", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["ascend_npu"]["status"] == "unavailable"
    assert rows["ascend_npu"]["reason"].startswith("torch_npu is not installed")
    check = subprocess.run([sys.executable, "-m", "slime_core", "plugins", "check"],
                           capture_output=True, text=True, timeout=120)
    # an unavailable accelerator is information, not a problem: the check passes
    assert check.returncode == 0, check.stdout + check.stderr
    assert "accelerator 'npu' (ascend_npu) unavailable" in check.stdout
    assert "ascend_npu" not in check.stderr


def test_import_touches_neither_torch_nor_torch_npu() -> None:
    code = "import sys, ascend_npu.plugin as p; p.probe(); print('torch' in sys.modules, 'torch_npu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False False", out.stderr
