"""Optional dependencies are extras of slime-core, and a missing one names its extra."""

from __future__ import annotations

import re

import pytest
from slime_core import extras
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.pluginmgr.registry import UnavailableRecordError


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

