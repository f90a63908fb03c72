"""Deprecated per-call hooks warn once per hook and plugin, and keep working; a plugin that
takes over a choice the config names keeps the user's choice to build on."""

from __future__ import annotations

import pickle
import warnings

import pytest
from slime_core.config.choices import replace_choice, replaced_choice
from slime_core.pluginmgr import SlimePluginManager
from slime_core.pluginmgr.deprecation import (
    DEPRECATED_HOOKS,
    HookDeprecationWarning,
    reset_warned,
    warn_deprecated_impls,
)
from slime_hookspecs import hookimpl


@pytest.fixture(autouse=True)
def _fresh():
    reset_warned()
    yield
    reset_warned()


class OldReward:
    @hookimpl
    def slime_reward(self, config, sample):
        return 0.5


class Observer:
    @hookimpl(wrapper=True)
    def slime_reward(self, config, sample):
        return (yield)


def _manager(*plugins: tuple[str, object]) -> SlimePluginManager:
    manager = SlimePluginManager()
    for name, plugin in plugins:
        manager.register_object(plugin, name)
    return manager


def test_a_deprecated_hook_warns_once_naming_plugin_hook_and_replacement() -> None:
    manager = _manager(("old_judge", OldReward()))
    with pytest.warns(HookDeprecationWarning) as got:
        warn_deprecated_impls(manager.hook.slime_reward)
    assert len(got) == 1
    msg = str(got[0].message)
    assert 'plugin "old_judge"' in msg and "deprecated hook slime_reward" in msg
    assert "RewardFunctionRecord" in msg and "rollout.reward" in msg
    assert "test_hook_deprecation.py" in msg  # where the implementation is
    assert issubclass(HookDeprecationWarning, DeprecationWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_deprecated_impls(manager.hook.slime_reward)  # once per process: silent now
    # the deprecated hook still answers
    assert manager.hook.slime_reward(config=None, sample=None) == 0.5


def test_each_plugin_is_named_and_wrappers_and_current_hooks_are_not_warned() -> None:
    manager = _manager(("observer", Observer()), ("a", OldReward()), ("b", OldReward()))
    with pytest.deprecated_call() as got:
        warn_deprecated_impls(manager.hook.slime_reward)
    assert sorted(str(w.message).split('"')[1] for w in got) == ["a", "b"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_deprecated_impls(manager.hook.slime_generate)  # not deprecated
        warn_deprecated_impls(manager.hook.slime_reward_group)  # nobody implements it


def test_every_deprecated_hook_is_a_hook() -> None:
    manager = SlimePluginManager()
    for name in DEPRECATED_HOOKS:
        assert getattr(manager.hook, name).spec is not None, name


class _Section:
    def __init__(self, **values):
        self.__dict__.update(values)


def test_replace_choice_remembers_the_users_choice_through_pickling() -> None:
    from slime_core.config.model import Config

    config = Config({"rollout": _Section(reward="math"), "eval": _Section(reward="")})
    assert replaced_choice(config, "rollout.reward") is None
    assert replace_choice(config, "rollout.reward", "judge") == "math"
    assert config.rollout.reward == "judge" and replaced_choice(config, "rollout.reward") == "math"
    assert replace_choice(config, "rollout.reward", "judge") == "math"  # again: unchanged
    assert replace_choice(config, "eval.reward", "judge") == ""
    copy = pickle.loads(pickle.dumps(config))
    assert replaced_choice(copy, "rollout.reward") == "math"
    assert replaced_choice(copy, "eval.reward") == ""
    with pytest.raises(ValueError, match="section.key"):
        replace_choice(config, "reward", "x")
