"""``core_accelerators`` is a default plugin, not an essential built-in: it can be disabled,
and a run without any accelerator then fails at config resolution naming the key, the record
and the plugin that provides it."""

from __future__ import annotations

import pytest
from slime_core.config import ConfigError
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.session import resolve
from slime_core.testing import TINY_QWEN2


def test_core_accelerators_is_a_default_plugin() -> None:
    m = SlimePluginManager(PluginSelection(plugins=[])).load()
    info = m.infos["core_accelerators"]
    assert info.source == "default" and info.distribution == "slime-std"
    rec = m.registries.accelerator.get("cpu")
    assert rec.owner == "core_accelerators" and rec.dist_backend == "gloo"
    assert type(rec.factory()).__module__ == "slime_std.accelerators.devices"


@pytest.mark.parametrize("name", ["auto", "cpu"])
def test_disabled_it_fails_naming_the_record_and_its_plugin(tmp_path, name: str) -> None:
    data = {"run": {"run_dir": str(tmp_path), "accelerator": name},
            "model": {"init_config": dict(TINY_QWEN2)}}
    sel = PluginSelection(plugins=[], disabled=["core_accelerators"])
    with pytest.raises(ConfigError) as exc:
        resolve(sel, None, (), data)
    msg = str(exc.value)
    assert f"run.accelerator = {name!r}" in msg
    assert "plugin core_accelerators (installed, disabled: drop --disable-plugin " \
           "core_accelerators)" in msg
    if name == "cpu":
        assert "unknown accelerator 'cpu'" in msg
    else:
        assert "no accelerator is registered" in msg
