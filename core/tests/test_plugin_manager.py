"""Plugin loading, selection and the error messages users see."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest

from slime_core.pluginmgr import (
    DuplicateRecordError,
    PluginLoadError,
    PluginSelection,
    PluginUsageError,
    SlimePluginManager,
    UnavailableRecordError,
    UnknownRecordError,
)
from slime_core.pluginmgr import manager as manager_mod
from slime_hookspecs import RewardFunctionRecord, hookimpl


class FakeDist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


def _module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    return mod


def _ep(name: str, module: str, dist: str = "slime-x", version: str = "1.0") -> EntryPoint:
    ep = EntryPoint(name=name, value=module, group="slime")
    return ep._for(FakeDist(dist, version)) if hasattr(ep, "_for") else ep


@pytest.fixture
def fake_eps(monkeypatch: pytest.MonkeyPatch):
    """The entry points of group ``slime`` are the list returned (the default plugins stay
    the installed ones)."""
    eps: list[EntryPoint] = []
    real = manager_mod.entry_points
    monkeypatch.setattr(manager_mod, "entry_points",
                        lambda group: list(eps) if group == "slime" else real(group=group))
    return eps


@hookimpl
def _good_rewards():
    return [RewardFunctionRecord(name="good_reward", factory=lambda c: (lambda s: 1.0))]


def good_module(name: str = "fake_good_plugin") -> str:
    _module(name, slime_register_reward_functions=_good_rewards)
    return name


def test_builtins_load_and_entry_points_are_listed(fake_eps) -> None:
    fake_eps.append(_ep("good", good_module()))
    m = SlimePluginManager(PluginSelection()).load()
    assert m.infos["core_config"].source == "builtin"
    info = m.infos["good"]
    assert (info.status, info.distribution, info.version) == ("active", "slime-x", "1.0")
    assert "good_reward" in m.registries.reward_function


def test_broken_plugin_is_reported_and_others_load(fake_eps) -> None:
    fake_eps.append(_ep("broken", "fake_missing_module_xyz", dist="slime-broken", version="0.3"))
    fake_eps.append(_ep("good", good_module()))
    m = SlimePluginManager(PluginSelection()).load()
    assert m.infos["broken"].status == "failed"
    assert "ModuleNotFoundError" in m.infos["broken"].reason
    assert m.infos["good"].status == "active"


def test_requested_broken_plugin_is_fatal_with_dist_and_version(fake_eps) -> None:
    fake_eps.append(_ep("broken", "fake_missing_module_xyz", dist="slime-broken", version="0.3"))
    with pytest.raises(PluginLoadError) as err:
        SlimePluginManager(PluginSelection(plugins=["broken"])).load()
    assert str(err.value).startswith('Error loading plugin "broken" from slime-broken 0.3: ')


def test_unknown_plugin_name_lists_installed(fake_eps) -> None:
    fake_eps.append(_ep("good", good_module()))
    with pytest.raises(PluginUsageError, match=r"unknown plugin 'goood' \(did you mean 'good'\?\); installed plugins: good"):
        SlimePluginManager(PluginSelection(plugins=["goood"])).load()


def test_plugins_option_is_an_exact_set_and_disable_blocks(fake_eps) -> None:
    fake_eps.append(_ep("good", good_module()))
    fake_eps.append(_ep("other", good_module("fake_other_plugin"), dist="slime-other"))
    m = SlimePluginManager(PluginSelection(plugins=["good"])).load()
    assert m.infos["other"].status == "blocked"
    assert m.infos["other"].reason == "not selected by --plugins"
    m = SlimePluginManager(PluginSelection(disabled=["good"])).load()
    assert (m.infos["good"].status, m.infos["good"].reason) == ("blocked", "disabled by --disable-plugin")


def test_naming_a_plugin_selects_the_other_plugins_of_its_distribution(fake_eps) -> None:
    fake_eps.append(_ep("sdk", good_module("fake_sdk_plugin"), dist="slime-wing"))
    fake_eps.append(_ep("wing_tools", good_module("fake_wing_tools"), dist="slime-wing"))
    fake_eps.append(_ep("other", good_module("fake_other_plugin2"), dist="slime-other"))
    m = SlimePluginManager(PluginSelection(plugins=["sdk"])).load()
    assert [m.infos[n].status for n in ("sdk", "wing_tools", "other")] == [
        "active", "active", "blocked"]
    m = SlimePluginManager(PluginSelection(plugins=["sdk"], disabled=["wing_tools"])).load()
    assert m.infos["wing_tools"].reason == "disabled by --disable-plugin"


def test_autoload_off_loads_nothing_external(fake_eps) -> None:
    fake_eps.append(_ep("good", good_module()))
    m = SlimePluginManager(PluginSelection(autoload=False)).load()
    assert m.infos["good"].status == "blocked"


def test_env_vars_select_and_disable() -> None:
    sel = PluginSelection.from_cli(environ={
        "SLIME_PLUGINS": "a, b", "SLIME_DISABLE_PLUGINS": "c",
        "SLIME_DISABLE_PLUGIN_AUTOLOAD": "1", "SLIME_TRACE_HOOKS": "1",
    })
    assert sel.plugins == ["a", "b"] and sel.disabled == ["c"]
    assert sel.autoload is False and sel.trace is True
    sel = PluginSelection.from_cli(plugins="x", disabled=("y",), environ={"SLIME_PLUGINS": "a"})
    assert sel.plugins == ["x"] and sel.disabled == ["y"] and sel.autoload


def test_disabling_an_essential_builtin_is_a_usage_error() -> None:
    with pytest.raises(PluginUsageError, match="'core_config' is essential to slime-core"):
        SlimePluginManager(PluginSelection(disabled=["core_config"])).load()


def test_wrong_hook_signature_names_plugin_hook_and_signature(fake_eps) -> None:
    @hookimpl
    def slime_reward_post_process(config, samples, extra):  # noqa: ANN001
        return None

    fake_eps.append(_ep("badsig", _module(
        "fake_badsig", slime_reward_post_process=slime_reward_post_process).__name__))
    with pytest.raises(PluginLoadError) as err:
        SlimePluginManager(PluginSelection(plugins=["badsig"])).load()
    msg = str(err.value)
    assert 'plugin "badsig"' in msg and "slime_reward_post_process(config, samples, extra)" in msg
    assert "specification slime_reward_post_process(config, samples)" in msg and "extra" in msg


def test_misspelled_hook_fails_with_suggestion(fake_eps) -> None:
    @hookimpl
    def slime_rewrad(config, sample):  # noqa: ANN001
        return 1.0

    fake_eps.append(_ep("typo", _module("fake_typo", slime_rewrad=slime_rewrad).__name__))
    with pytest.raises(PluginLoadError, match="did you mean 'slime_reward'"):
        SlimePluginManager(PluginSelection(plugins=["typo"])).load()


def test_required_plugin_missing_is_fatal(fake_eps) -> None:
    with pytest.raises(PluginLoadError, match="required plugin 'nope' is not loaded"):
        SlimePluginManager(PluginSelection(required=["nope"])).load()


def test_duplicate_record_names_both_owners(fake_eps) -> None:
    fake_eps.append(_ep("good", good_module()))
    fake_eps.append(_ep("twin", good_module("fake_twin"), dist="slime-twin"))
    m = SlimePluginManager(PluginSelection()).load()
    with pytest.raises(DuplicateRecordError, match="'good_reward' is registered by both plugin 'good' and plugin 'twin'"):
        m.registries.reward_function


def test_unknown_record_lists_choices_and_unavailable_gives_reason() -> None:
    m = SlimePluginManager(PluginSelection(autoload=False)).load()
    with pytest.raises(UnknownRecordError, match=r"unknown accelerator 'gpu' \(did you mean 'cpu'\?\); choose one of: cpu, cuda"):
        m.registries.accelerator.get("gpu")

    @hookimpl
    def slime_register_reward_functions():
        return RewardFunctionRecord(name="needs_x", factory=lambda c: None, probe=lambda: "x is not installed")

    m.register_object(types.SimpleNamespace(slime_register_reward_functions=slime_register_reward_functions), "probe_test")
    with pytest.raises(UnavailableRecordError, match="'needs_x' .* is unavailable: x is not installed"):
        m.registries.reward_function.get("needs_x")


def test_trace_hooks_shows_calls_with_tensor_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    m = SlimePluginManager(PluginSelection(autoload=False, trace=True)).load()
    m.hook.slime_rollout_data_postprocess(config=None, rollout_id=3, batch=torch.zeros(2, 5))
    err = capsys.readouterr().err
    assert "[hook] slime_rollout_data_postprocess(" in err
    assert "Tensor(shape=(2, 5), dtype=float32)" in err
    assert "done in" in err and "ms" in err
