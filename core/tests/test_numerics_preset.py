"""``algorithm.numerics``: one key selects the defaults of every numerical convention.

The values each preset gives are checked against THUDM/slime's and verl's outputs in
``plugins/slime_grpo/tests/test_grpo_numerics_on_cpu.py`` and
``plugins/slime_ppo/tests/test_ppo_numerics_on_cpu.py``; here: how the preset resolves.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from slime_core.config.sections import SECTIONS, AlgorithmSection
from slime_core.config import ConfigError, ConfigSchema, load_config
from slime_core.runner.rundir import config_to_toml
from slime_hookspecs import ConfigSection

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _schema() -> ConfigSchema:
    schema = ConfigSchema()
    for name, cls, doc in SECTIONS:
        schema.add(ConfigSection(name=name, schema=cls, summary=doc))
    return schema


def test_slime_is_the_default_and_the_field_defaults_are_its_column() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(AlgorithmSection)}
    assert defaults["numerics"] == "slime"
    presets = AlgorithmSection.NUMERICS_PRESETS
    assert set(presets) == {"slime", "verl"} and set(presets["slime"]) == set(presets["verl"])
    assert {k: defaults[k] for k in presets["slime"]} == presets["slime"]
    # each key a preset sets is a field (a typo would be silently ignored otherwise)
    assert set(presets["verl"]) <= set(defaults)


def test_verl_sets_every_key_of_its_column() -> None:
    cfg = load_config(_schema(), overrides=["algorithm.numerics=verl"])
    for key, value in AlgorithmSection.NUMERICS_PRESETS["verl"].items():
        assert getattr(cfg.algorithm, key) == value, key
    assert cfg.algorithm.eps_clip_c == 3.0 and cfg.algorithm.loss_reducer == "token_mean"


def test_a_key_set_explicitly_wins_over_the_preset(tmp_path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[algorithm]\nnumerics = "verl"\nloss_reducer = "seq_mean_token_mean"\n')
    cfg = load_config(_schema(), path, overrides=["algorithm.eps_clip_c=0"])
    assert cfg.algorithm.numerics == "verl"
    assert cfg.algorithm.loss_reducer == "seq_mean_token_mean"  # from the file
    assert cfg.algorithm.eps_clip_c == 0.0  # from -o
    assert cfg.algorithm.log_ratio_clamp == 20.0  # still verl's
    # and the preset itself may come from -o, over a file that names another
    cfg = load_config(_schema(), path, overrides=["algorithm.numerics=slime"])
    assert cfg.algorithm.eps_clip_c == 0.0 and cfg.algorithm.masked_steps == "count"
    assert cfg.algorithm.loss_reducer == "seq_mean_token_mean"


def test_the_run_directory_records_the_resolved_values() -> None:
    cfg = load_config(_schema(), overrides=["algorithm.numerics=verl",
                                            "algorithm.kl_estimator=k2"])
    written = tomllib.loads(config_to_toml(cfg))["algorithm"]
    assert written["numerics"] == "verl" and written["kl_estimator"] == "k2"
    assert written["log_ratio_clamp"] == 20.0 and written["count_empty_samples"] is False
    # read back, the file gives the same config (resume), whatever numerics' default
    again = load_config(_schema(), data={"algorithm": written})
    assert dataclasses.asdict(again.algorithm) == dataclasses.asdict(cfg.algorithm)


def test_an_unknown_preset_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="algorithm.numerics: 'trl' is not one of slime, verl"):
        load_config(_schema(), overrides=["algorithm.numerics=trl"])
