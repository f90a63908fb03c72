"""Record names in core_tools' sections (``tools.enabled``, ``tools.parser``, ...) are checked
when the config is resolved, as the core's own are: a typo fails naming the key and the
nearest valid name."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from slime_agent.tools_plugin import RECORD_KEYS
from slime_core.config import ConfigError
from slime_core.config.schema import build_schema
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.session import resolve

ARITH = Path(__file__).resolve().parents[3] / "examples" / "tiny_arith" / "grpo.toml"
SELECTION = PluginSelection(plugins=["slime_grpo", "core_tools", "core_sandbox"])
KEYS = [(sec, key, spec) for sec, keys in RECORD_KEYS.items() for key, spec in keys.items()]


def test_every_record_key_is_declared_on_a_field() -> None:
    schema = build_schema(SlimePluginManager(SELECTION).load())
    for sec, key, _ in KEYS:
        assert key in {f.name for f in fields(schema.get(sec).schema)}, f"{sec}.{key}"
        assert schema.get(sec).record_keys[key] is not None


@pytest.mark.parametrize(("section", "key", "spec"), KEYS, ids=[f"{s}.{k}" for s, k, _ in KEYS])
def test_a_typo_in_a_record_key_fails_at_resolve(section: str, key: str, spec) -> None:  # noqa: ANN001
    m = SlimePluginManager(SELECTION).load()
    good = sorted(r.name for r in m.registries.get(spec.record.kind)
                  if spec.stage is None or r.stage == spec.stage)[0]
    typo = good + "z"
    override = f"{section}.{key}=" + (f'["{typo}"]' if key == "enabled" else typo)
    with pytest.raises(ConfigError) as err:
        resolve(SELECTION, ARITH, (override,))
    msg = str(err.value)
    assert f"config {section}.{key} = " in msg and f"(from -o {override})" in msg
    assert f"did you mean {good!r}?" in msg


def test_the_sections_without_their_plugin_name_it(tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text('[tools]\nenabled = ["calculator"]\n')
    with pytest.raises(ConfigError, match=r"config section \[tools\] .* belongs to plugin "
                                          r"core_tools \(installed, not selected: add --plugins "
                                          r"slime_grpo,core_tools\)"):
        resolve(PluginSelection(plugins=["slime_grpo"]), p)
