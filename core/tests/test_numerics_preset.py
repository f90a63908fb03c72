"""``algorithm.numerics`` and plugin extensions of a section: how presets and extension keys
resolve. The values each preset gives are checked against THUDM/slime's and verl's outputs in
``plugins/slime_grpo/tests/test_grpo_numerics_on_cpu.py`` and
``plugins/slime_ppo/tests/test_ppo_numerics_on_cpu.py``; here the machinery, with an
extension written for the test (the core alone registers no algorithm).
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
from dataclasses import dataclass

import pytest
from slime_core.config import ConfigError, ConfigSchema, load_config
from slime_core.config.sections import SECTIONS, AlgorithmSection
from slime_core.runner.rundir import config_to_toml
from slime_hookspecs import ConfigSection

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass
class ClipKeys:
    clip_c: float = 0.0  # preset (verl: 3.0)
    clamp: float = 0.0  # preset (verl: 20.0)
    steps: str = "count"  # preset (verl: skip)

    def __post_init__(self) -> None:
        if self.clip_c and self.clip_c <= 1:
            raise ValueError("algorithm.clip_c: must be > 1 (0 turns it off)")

    NUMERICS_PRESETS = {
        "slime": {"clip_c": 0.0, "clamp": 0.0, "steps": "count", "loss_reducer": "seq"},
        "verl": {"clip_c": 3.0, "clamp": 20.0, "steps": "skip", "loss_reducer": "token"},
    }


def _ext(**kw: object) -> ConfigSection:
    return ConfigSection(name="algorithm", schema=ClipKeys, extends=True, owner="clip_plugin",
                         defaults={"loss_reducer": "seq"}, **kw)  # type: ignore[arg-type]


def _schema(*extra: ConfigSection) -> ConfigSchema:
    schema = ConfigSchema()
    for name, cls, doc in SECTIONS:
        schema.add(ConfigSection(name=name, schema=cls, summary=doc, owner="core_config"))
    for sec in extra:
        schema.add(sec)
    schema.check_extensions()
    return schema


def test_slime_is_the_default_and_the_core_names_no_record() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(AlgorithmSection)}
    assert defaults["numerics"] == "slime"
    assert defaults["advantage_estimator"] == defaults["policy_loss"] == ""
    assert defaults["loss_reducer"] == defaults["kl_estimator"] == ""


def test_an_extension_adds_keys_defaults_and_presets() -> None:
    cfg = load_config(_schema(_ext()))
    assert isinstance(cfg.algorithm, AlgorithmSection)
    assert (cfg.algorithm.clip_c, cfg.algorithm.steps, cfg.algorithm.loss_reducer) == (
        0.0, "count", "seq")
    cfg = load_config(_schema(_ext()), overrides=["algorithm.numerics=verl"])
    assert (cfg.algorithm.clip_c, cfg.algorithm.clamp, cfg.algorithm.loss_reducer) == (
        3.0, 20.0, "token")
    with pytest.raises(ConfigError, match="algorithm.clip_c: must be > 1"):
        load_config(_schema(_ext()), overrides=["algorithm.clip_c=0.5"])
    # without the extension the key does not exist
    with pytest.raises(ConfigError, match="unknown config key 'algorithm.clip_c'"):
        load_config(_schema(), overrides=["algorithm.clip_c=2"])


def test_a_key_set_explicitly_wins_over_the_preset(tmp_path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[algorithm]\nnumerics = "verl"\nloss_reducer = "seq"\n')
    cfg = load_config(_schema(_ext()), path, overrides=["algorithm.clip_c=0"])
    assert cfg.algorithm.numerics == "verl"
    assert cfg.algorithm.loss_reducer == "seq"  # from the file
    assert cfg.algorithm.clip_c == 0.0  # from -o
    assert cfg.algorithm.clamp == 20.0  # still verl's
    # and the preset itself may come from -o, over a file that names another
    cfg = load_config(_schema(_ext()), path, overrides=["algorithm.numerics=slime"])
    assert cfg.algorithm.clip_c == 0.0 and cfg.algorithm.steps == "count"


def test_the_run_directory_records_the_resolved_values() -> None:
    cfg = load_config(_schema(_ext()), overrides=["algorithm.numerics=verl",
                                                  "algorithm.kl_estimator=k2"])
    written = tomllib.loads(config_to_toml(cfg))["algorithm"]
    assert written["numerics"] == "verl" and written["kl_estimator"] == "k2"
    assert written["clamp"] == 20.0 and written["steps"] == "skip"
    # read back, the file gives the same config (resume), whatever numerics' default
    again = load_config(_schema(_ext()), data={"algorithm": written})
    assert dataclasses.asdict(again.algorithm) == dataclasses.asdict(cfg.algorithm)


def test_a_merged_section_survives_pickling_and_copying() -> None:
    cfg = load_config(_schema(_ext()), overrides=["algorithm.clip_c=2"])
    for again in (pickle.loads(pickle.dumps(cfg.algorithm)), copy.deepcopy(cfg.algorithm)):
        assert type(again) is type(cfg.algorithm) and again == cfg.algorithm


def test_conflicts_between_plugins_fail_naming_both() -> None:
    @dataclass
    class Again:
        clamp: float = 1.0

    clash = ConfigSection(name="algorithm", schema=Again, extends=True, owner="other")
    with pytest.raises(ConfigError, match="algorithm.clamp is contributed by both plugin "
                                          "'clip_plugin' and plugin 'other'"):
        _schema(_ext(), clash)

    @dataclass
    class Nothing:
        pass

    other_default = ConfigSection(name="algorithm", schema=Nothing, extends=True, owner="other",
                                  defaults={"loss_reducer": "token"})
    with pytest.raises(ConfigError, match="algorithm.loss_reducer: plugin 'clip_plugin' makes "
                                          "'seq' its default and plugin 'other' 'token'"):
        _schema(_ext(), other_default)
    orphan = ConfigSection(name="nowhere", schema=Nothing, extends=True, owner="other")
    with pytest.raises(ConfigError, match=r"plugin 'other' extends config section \[nowhere\]"):
        _schema(orphan)


def test_an_unknown_preset_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="algorithm.numerics: 'trl' is not one of slime, verl"):
        load_config(_schema(), overrides=["algorithm.numerics=trl"])
