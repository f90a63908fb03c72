"""Optional dependencies are extras of slime-core, and a missing one names its extra."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from slime_core import extras
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.pluginmgr.registry import UnavailableRecordError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _name(requirement: str) -> str:
    return re.split(r"[<>=;\[ ]", requirement, maxsplit=1)[0].lower()


def test_pyproject_declares_each_extra_and_no_hard_dependency_on_them() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    hard = {_name(r) for r in project["dependencies"]}
    optional = project["optional-dependencies"]
    for module, (dist, extra) in extras.EXTRAS.items():
        assert dist not in hard, f"{dist} ({module}) is a hard dependency of slime-core"
        assert dist in {_name(r) for r in optional[extra]}, f"extra {extra!r} does not install {dist}"
        assert extra in optional["all"][0], f"slime-core[all] leaves out {extra!r}"


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch):
    """``without("math_verify")``: the module looks uninstalled to the probes."""
    real = importlib.util.find_spec

    def hide(*modules: str) -> None:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name in modules else real(name, *a))

    return hide


def test_a_missing_extra_names_the_extra(without) -> None:
    without("matplotlib")
    assert extras.missing("matplotlib") == (
        "matplotlib is not installed (pip install 'slime-core[report]')")
    with pytest.raises(extras.MissingExtraError, match=re.escape("pip install 'slime-core[report]'")):
        extras.require("matplotlib")
    # a package that is no extra of core keeps the plain hint
    without("wandb")
    assert extras.missing("wandb") == "wandb is not installed (pip install wandb)"


def test_a_plugin_names_its_own_extra(without) -> None:
    without("math_verify")
    assert extras.probe("math_verify", "math-verify", "slime-std[math]")() == (
        "math-verify is not installed (pip install 'slime-std[math]')")
    with pytest.raises(extras.MissingExtraError, match=re.escape("pip install 'slime-std[math]'")):
        extras.require("math_verify", "math-verify", "slime-std[math]")


@pytest.mark.parametrize(("registry", "name", "module", "extra"), [
    ("logger", "tensorboard", "tensorboard", "tensorboard"),
])
def test_records_that_need_an_extra_are_unavailable_naming_it(without, registry: str, name: str,
                                                               module: str, extra: str) -> None:
    without(module)
    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    with pytest.raises(UnavailableRecordError, match=re.escape(f"pip install 'slime-core[{extra}]'")):
        getattr(manager.registries, registry).get(name)

