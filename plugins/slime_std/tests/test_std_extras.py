"""slime-std's optional dependencies are extras of slime-std, and a missing one names its extra."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.pluginmgr.registry import UnavailableRecordError
from slime_std import extras

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
        assert dist not in hard, f"{dist} ({module}) is a hard dependency of slime-std"
        assert dist in {_name(r) for r in optional[extra]}, f"extra {extra!r} does not install {dist}"
        assert extra in optional["all"][0], f"slime-std[all] leaves out {extra!r}"


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch):
    """``without("math_verify")``: the module looks uninstalled to the probes."""
    real = importlib.util.find_spec

    def hide(*modules: str) -> None:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name in modules else real(name, *a))

    return hide


@pytest.mark.parametrize(("registry", "name", "module", "extra"), [
    ("reward_function", "math", "math_verify", "math"),
    ("reward_function", "boxed_math", "math_verify", "math"),
    ("reward_function", "reasoning_gym", "reasoning_gym", "reasoning-gym"),
    ("data_source", "reasoning_gym", "reasoning_gym", "reasoning-gym"),
])
def test_records_that_need_an_extra_are_unavailable_naming_it(without, registry: str, name: str,
                                                               module: str, extra: str) -> None:
    without(module)
    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    with pytest.raises(UnavailableRecordError, match=re.escape(f"pip install 'slime-std[{extra}]'")):
        getattr(manager.registries, registry).get(name)


def test_math_reward_fails_naming_the_extra_instead_of_scoring_zero(without) -> None:
    from slime_core.api import MissingExtraError
    from slime_hookspecs import Sample
    from slime_std.rewards.math_reward import math_reward

    without("math_verify")
    with pytest.raises(MissingExtraError, match=r"slime-std\[math\]"):
        math_reward(Sample(prompt="1+1", response="2", label="2"))


def test_a_package_that_is_no_extra_keeps_the_plain_hint(without) -> None:
    without("pyarrow")
    assert extras.probe("pyarrow", "pyarrow")() == "pyarrow is not installed (pip install pyarrow)"
