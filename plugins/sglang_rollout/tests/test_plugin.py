"""The entry point: registration, the availability probe, `core plugins`, light import."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import types

import pytest
from sglang_rollout import plugin, probe
from sglang_rollout.config import SGLangSection


def test_record_and_section_are_registered(resolve) -> None:
    manager, config = resolve({})
    rec = manager.registries.rollout_engine.get("sglang", require_available=False)
    assert rec.owner == "sglang_rollout" and rec.factory is plugin.make_engine
    assert rec.probe is plugin.probe
    assert isinstance(config.sglang, SGLangSection) and config.sglang.urls == []


def test_probe_messages(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(plugin, "_attaching", None)
    monkeypatch.setattr(probe.importlib.util, "find_spec", lambda name: None)
    assert plugin.probe() == "sglang is not installed (pip install 'slime-sglang-rollout[sglang]')"
    monkeypatch.setattr(probe.importlib.util, "find_spec", lambda name: object())
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # torch not imported: look at /proc
    monkeypatch.setattr(probe, "NVIDIA_DRIVER_FILE", str(tmp_path / "absent"))
    assert plugin.probe() == "SGLang needs a CUDA GPU: no NVIDIA driver found"
    (tmp_path / "version").write_text("NVRM version: 570.00\n")
    monkeypatch.setattr(probe, "NVIDIA_DRIVER_FILE", str(tmp_path / "version"))
    assert plugin.probe() is None
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)  # torch imported: ask it instead
    assert plugin.probe() == "SGLang needs a CUDA GPU: no NVIDIA driver found"


def test_a_resolved_config_with_urls_makes_the_engine_available(resolve, monkeypatch) -> None:
    monkeypatch.setattr(probe, "launch_unavailable_reason", lambda: "no GPU here")
    monkeypatch.setattr(plugin, "launch_unavailable_reason", lambda: "no GPU here")
    _, attaching = resolve({"sglang": {"urls": ["127.0.0.1:1"]}})
    assert plugin.probe() is None
    _, launching = resolve({})
    assert plugin.probe() == "no GPU here"
    manager, attaching = resolve({"sglang": {"urls": ["127.0.0.1:1"]}})
    assert plugin.probe() is None
    del manager, attaching, _  # the manager keeps the config (historic slime_configure call)
    gc.collect()
    assert plugin.probe() == "no GPU here"  # only while that config lives


def test_probe_asks_the_configured_interpreter(resolve, tmp_path, monkeypatch) -> None:
    """sglang.python / sglang.env: the package is looked up where servers will run."""
    monkeypatch.setattr(probe, "NVIDIA_DRIVER_FILE", str(tmp_path / "absent"))
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    engine = {"engine": "sglang"}
    _, missing = resolve({"rollout": engine, "sglang": {"python": sys.executable,
                                                        "env": {"PYTHONPATH": str(tmp_path)}}})
    why = plugin.probe()
    if probe.sglang_installed():
        pytest.skip("sglang is installed for this interpreter")
    assert why is not None and why.startswith(f"sglang is not installed for {sys.executable} "
                                              "(with sglang.env ['PYTHONPATH'])")
    _, found = resolve({"rollout": engine, "sglang": {"env": {"PYTHONPATH": str(site)}}})
    assert plugin.probe() == probe.NO_CUDA  # found there; the GPU check comes next
    _, bad = resolve({"rollout": engine, "sglang": {"python": str(tmp_path / "nope")}})
    assert "could not be run" in str(plugin.probe())


def _core(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slime_core", *args], capture_output=True,
                          text=True, timeout=120)


def test_core_plugins_shows_why_sglang_is_unavailable_here() -> None:
    why = probe.launch_unavailable_reason()
    res = _core("plugins", "--json")
    assert res.returncode == 0, res.stderr
    row = next(r for r in json.loads(res.stdout) if r["name"] == "sglang_rollout")
    assert row["distribution"] == "slime-sglang-rollout"
    assert set(row["hooks"]) == {"slime_add_config", "slime_configure",
                                 "slime_register_rollout_engines"}
    if why is None:
        assert row["status"] == "active"
    else:
        assert (row["status"], row["reason"]) == ("unavailable", why)
        text = _core("plugins").stdout
        assert f"unavailable: {why}" in next(ln for ln in text.splitlines()
                                             if ln.startswith("sglang_rollout"))


def test_entry_point_module_is_light() -> None:
    code = ("import sys, sglang_rollout.plugin, sglang_rollout.config, sglang_rollout.probe; "
            "print([m for m in ('torch', 'aiohttp', 'sglang', 'transformers') if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_a_run_without_urls_fails_with_the_probe_reason(resolve, base_config) -> None:
    from slime_core.pluginmgr.registry import UnavailableRecordError
    from slime_core.runner.driver import run_training

    why = probe.launch_unavailable_reason()
    if why is None:
        pytest.skip("SGLang can launch on this host")
    base_config["rollout"]["engine"] = "sglang"
    manager, config = resolve(base_config, ("slime_grpo", "sglang_rollout"))
    with pytest.raises(UnavailableRecordError) as err:
        run_training(manager, config)
    assert str(err.value) == (f"rollout engine 'sglang' (plugin sglang_rollout) is "
                              f"unavailable: {why}")
