"""Typed config: unknown keys, wrong types, overrides, plugin sections."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from slime_core.config import ConfigError, parse_override
from slime_core.pluginmgr import PluginSelection
from slime_core.session import resolve
from slime_hookspecs import ConfigSection, hookimpl


def _resolve(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()):  # noqa: ANN202
    p = tmp_path / "run.toml"
    p.write_text(text)
    return resolve(PluginSelection(autoload=False), p, overrides)


def test_defaults_and_overrides(tmp_path: Path) -> None:
    _, cfg = _resolve(tmp_path, "[rollout]\ntemperature = 0.7\n", ("rollout.n_samples_per_prompt=4",))
    assert cfg.rollout.temperature == 0.7
    assert cfg.rollout.n_samples_per_prompt == 4
    assert cfg.train.backend == "torch"


def test_unknown_key_suggests_nearest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'rollout.temprature'; did you mean 'rollout.temperature'\?"):
        _resolve(tmp_path, "[rollout]\ntemprature = 0.7\n")


def test_error_names_the_faulty_override_not_a_valid_one(tmp_path: Path) -> None:
    # the "valid:" list names run.seed and run.num_rollouts too; the blame goes to run.dir
    with pytest.raises(ConfigError) as err:
        _resolve(tmp_path, "", ("run.seed=1", "run.dir=x", "run.num_rollouts=2"))
    assert str(err.value).endswith("(from the override -o run.dir=x)")
    with pytest.raises(ConfigError) as err:
        _resolve(tmp_path, "", ("run.seed=1", "run.num_rollouts=abc"))
    assert str(err.value).endswith("(from the override -o run.num_rollouts=abc)")


def test_unknown_section_suggests_nearest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown config section 'rolout'; did you mean 'rollout'"):
        _resolve(tmp_path, "[rolout]\nx = 1\n")


def test_wrong_type_names_key_expected_and_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rollout.n_samples_per_prompt: expected int, got 'eight' \(str\)"):
        _resolve(tmp_path, '[rollout]\nn_samples_per_prompt = "eight"\n')
    with pytest.raises(ConfigError, match="run.loggers\\[0\\]: expected str, got 3"):
        _resolve(tmp_path, "[run]\nloggers = [3]\n")


def test_range_check_names_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rollout.top_p: must be in"):
        _resolve(tmp_path, "[rollout]\ntop_p = 1.5\n")



def test_rollout_dtype_follows_model_dtype_unless_set(tmp_path):
    from slime_core.models.loading import rollout_dtype

    _, cfg = _resolve(tmp_path, "[model]\ndtype = \"float32\"\n", ())
    assert cfg.rollout.dtype == "" and rollout_dtype(cfg) == "float32"
    _, cfg = _resolve(tmp_path, "[model]\ndtype = \"float32\"\n", ("rollout.dtype=bfloat16",))
    assert rollout_dtype(cfg) == "bfloat16" and cfg.model.dtype == "float32"
    with pytest.raises(ConfigError, match="rollout.dtype: must be"):
        _resolve(tmp_path, "", ("rollout.dtype=fp8",))
    with pytest.raises(ConfigError, match="rollout.dtype_rounding: must be stochastic or nearest"):
        _resolve(tmp_path, "", ("rollout.dtype_rounding=up",))

def test_decode_autotune_needs_the_compiled_step(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rollout.compile_autotune: needs rollout.compile_decode"):
        _resolve(tmp_path, "[rollout]\ncompile_decode = false\ncompile_autotune = true\n")
    # compile_decode = "auto" (the default) is accepted; slime-std's local_engine resolves it
    # with the config: true when autotune is asked for and the decode graphs are captured
    _, cfg = _resolve(tmp_path, "[rollout]\ncompile_autotune = true\n")
    assert cfg.rollout.compile_decode is cfg.rollout.cuda_graphs
    _, cfg = _resolve(tmp_path, "[rollout]\ncompile_decode = true\ncompile_autotune = true\n")
    assert cfg.rollout.compile_autotune is True and cfg.rollout.compile_pdl is True


@pytest.mark.parametrize(("section", "key", "value"), [
    ("rollout", "cuda_graphs", "yes"), ("rollout", "compile_decode", "on"),
    ("train", "compile", "maybe"),
])
def test_fast_path_keys_refuse_other_strings_naming_the_key(section: str, key: str,
                                                             value: str) -> None:
    from slime_core.testing import build_test_config

    with pytest.raises((ConfigError, ValueError), match=f"{section}.{key}"):
        build_test_config(**{section: {key: value}})


def test_int_is_accepted_for_float(tmp_path: Path) -> None:
    _, cfg = _resolve(tmp_path, "[train]\nlr = 1\n")
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)


def test_parse_override_values() -> None:
    assert parse_override("a.b=3") == ("a", "b", 3)
    assert parse_override("a.b=[1, 2]") == ("a", "b", [1, 2])
    assert parse_override("a.b=hello") == ("a", "b", "hello")
    with pytest.raises(ConfigError):
        parse_override("novalue")


@dataclass
class _Extra:
    alpha: float = 0.5


class _ExtraPlugin:
    @hookimpl
    def slime_add_config(self, schema):  # noqa: ANN001, ANN201
        return ConfigSection(name="extra", schema=_Extra)


def test_plugin_contributes_a_section_and_duplicate_fails(tmp_path: Path) -> None:
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema
    from slime_core.pluginmgr import SlimePluginManager

    m = SlimePluginManager(PluginSelection(autoload=False)).load()
    m.register_object(_ExtraPlugin(), "extra_plugin")
    cfg = load_config(build_schema(m), data={"extra": {"alpha": 2}})
    assert cfg.extra.alpha == 2.0

    class _Dup:
        @hookimpl
        def slime_add_config(self, schema):  # noqa: ANN001, ANN201
            return ConfigSection(name="extra", schema=_Extra)

    m.register_object(_Dup(), "dup_plugin")
    with pytest.raises(ConfigError, match=r"\[extra\] is contributed by both plugin 'extra_plugin' and plugin 'dup_plugin'"):
        build_schema(m)


def test_configure_hook_can_reject(tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text("[rollout]\nbatch_size = 3\n")
    mod = tmp_path / "reject_odd_plugin.py"
    mod.write_text(
        "from slime_hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def slime_configure(config):\n"
        "    if config.rollout.batch_size % 2:\n"
        "        raise ValueError('rollout.batch_size must be even for this plugin')\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ValueError, match="must be even"):
            resolve(PluginSelection(autoload=False), p, ("run.plugin_modules=['reject_odd_plugin']",))
    finally:
        sys.path.remove(str(tmp_path))
