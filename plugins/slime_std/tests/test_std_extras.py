"""slime-std's optional dependencies are extras of slime-std, and a missing one names its extra."""

from __future__ import annotations

import re

import pytest
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.pluginmgr.registry import UnavailableRecordError
from slime_std import extras


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
