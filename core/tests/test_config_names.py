"""Record names in a config are resolved with the config, before anything is built (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from slime_core.config.sections import RECORD_KEYS as CORE_KEYS
from slime_core.config import ConfigError
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.session import resolve

ARITH = Path(__file__).resolve().parents[2] / "examples" / "tiny_arith" / "grpo.toml"
KEYS = [(sec, key, spec) for sec, keys in CORE_KEYS.items() for key, spec in keys.items()]
GRPO = PluginSelection(plugins=["slime_grpo"])


def _valid_name(spec) -> str:  # noqa: ANN001
    """A registered name of the key's kind (and filter stage)."""
    m = SlimePluginManager(GRPO).load()
    names = sorted(r.name for r in m.registries.get(spec.record.kind)
                   if spec.stage is None or r.stage == spec.stage)
    assert names, f"no {spec.record.kind} registered to test with"
    return names[0]


def test_every_record_key_is_declared_on_a_field() -> None:
    from dataclasses import fields

    from slime_core.config.schema import build_schema

    schema = build_schema(SlimePluginManager(GRPO).load())
    for sec, key, _ in KEYS:
        assert key in {f.name for f in fields(schema.get(sec).schema)}, f"{sec}.{key}"
        assert schema.get(sec).record_keys[key] is not None


@pytest.mark.parametrize(("section", "key", "spec"), KEYS, ids=[f"{s}.{k}" for s, k, _ in KEYS])
def test_a_typo_in_any_record_key_fails_at_resolve(section: str, key: str, spec) -> None:  # noqa: ANN001
    good = _valid_name(spec)
    typo = good + "z"
    is_list = key == "loggers"
    override = f"{section}.{key}=" + (f'["{typo}"]' if is_list else typo)
    with pytest.raises(ConfigError) as err:
        resolve(GRPO, ARITH, (override,))
    msg = str(err.value)
    assert f"config {section}.{key} = " in msg
    assert f"(from -o {override})" in msg
    assert f"unknown {spec.record.kind.replace('_', ' ')} {typo!r}" in msg
    assert f"did you mean {good!r}?" in msg
    assert f"available: {good}" in msg or f", {good}" in msg


def test_the_toml_file_is_named_as_the_source(tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text('[rollout]\nengine = "vlm"\n')
    with pytest.raises(ConfigError, match=rf"rollout.engine = 'vlm' \(from {p}\): unknown rollout "
                                          r"engine 'vlm'; available: local, replay"):
        resolve(GRPO, p)


def test_a_name_of_an_installed_unselected_plugin_names_it() -> None:
    with pytest.raises(ConfigError) as err:
        resolve(GRPO, ARITH, ("algorithm.advantage_estimator=gae",))
    assert ("'gae' is provided by plugin slime_ppo (installed, not selected: add --plugins "
            "slime_grpo,slime_ppo)") in str(err.value)


def test_a_plugin_section_without_its_plugin_names_the_owner(tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text("[ppo]\ncritic_lr = 1e-5\n")
    with pytest.raises(ConfigError, match=rf"config section \[ppo\] \(in {p}\) belongs to plugin "
                                          r"slime_ppo \(installed, not selected: add --plugins "
                                          r"slime_grpo,slime_ppo\)"):
        resolve(GRPO, p)


def test_a_filter_of_the_wrong_stage_fails() -> None:
    with pytest.raises(ConfigError, match="'fifo' .* is a buffer filter; "
                                          "rollout.dynamic_sampling_filter needs a "
                                          "dynamic_sampling filter: nonzero_std"):
        resolve(GRPO, ARITH, ("rollout.dynamic_sampling_filter=fifo",))


def test_optional_and_special_values_pass() -> None:
    _, cfg = resolve(GRPO, ARITH, ('algorithm.is_correction=""', "run.accelerator=auto",
                                   'eval.reward=""'))
    assert cfg.algorithm.is_correction == ""


def test_defaults_of_an_empty_registry_are_left_alone() -> None:
    # no algorithm plugin: the core names no estimator, and need not here
    _, cfg = resolve(PluginSelection(autoload=False))
    assert cfg.algorithm.advantage_estimator == ""
    with pytest.raises(ConfigError, match="advantage_estimator = 'grpo' .*provided by plugin "
                                          "slime_grpo .*autoload disabled"):
        resolve(PluginSelection(autoload=False), None, ("algorithm.advantage_estimator=grpo",))


def test_core_run_fails_before_any_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    import slime_core.models.loading as loading
    from slime_core.cli.main import cli

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded before the config's names were checked")

    monkeypatch.setattr(loading, "load_causal_lm", boom)
    monkeypatch.setattr(loading, "load_tokenizer", boom)
    res = CliRunner().invoke(cli, ["run", "--plugins", "slime_grpo", "--config", str(ARITH),
                                    "-o", "algorithm.advantage_estimator=grpoo"])
    assert res.exit_code != 0
    assert "algorithm.advantage_estimator = 'grpoo'" in res.output
    assert "-o algorithm.advantage_estimator=grpoo" in res.output
    assert "did you mean 'grpo'?" in res.output


def test_needs_ref_fails_on_an_unknown_estimator() -> None:
    from slime_core.trainkit.compose import needs_ref
    from slime_core.context import set_manager
    from slime_core.pluginmgr import UnknownRecordError
    from slime_core.testing import build_test_config

    set_manager(SlimePluginManager(GRPO).load())
    cfg = build_test_config(algorithm={"advantage_estimator": "grpoo"})
    with pytest.raises(UnknownRecordError, match="did you mean 'grpo'"):
        needs_ref(cfg)


def test_the_algorithm_plugin_names_the_default_records() -> None:
    _, cfg = resolve(GRPO, ARITH)
    assert (cfg.algorithm.advantage_estimator, cfg.algorithm.policy_loss,
            cfg.algorithm.loss_reducer, cfg.algorithm.kl_estimator) == (
        "grpo", "ppo", "seq_mean_token_mean", "k1")
    assert cfg.algorithm.eps_clip == 0.2  # a key slime_grpo adds to [algorithm]


def test_a_key_of_an_inactive_plugin_names_the_plugin() -> None:
    with pytest.raises(ConfigError, match=r"config key algorithm.lam \(in -o algorithm.lam=0.9\) "
                                          r"belongs to plugin slime_ppo .*add --plugins "
                                          r"slime_grpo,slime_ppo"):
        resolve(GRPO, ARITH, ("algorithm.lam=0.9",))
    with pytest.raises(ConfigError, match="algorithm.eps_clip .* belongs to plugin slime_grpo"):
        resolve(PluginSelection(plugins=[], autoload=False), ARITH, ("algorithm.eps_clip=0.3",))
    # slime-ppo declares slime-grpo (it reads slime_grpo's [algorithm] keys): selecting it
    # loads both, so slime_grpo's keys are known
    _, cfg = resolve(PluginSelection(plugins=["slime_ppo"], autoload=False), ARITH,
                     ("algorithm.eps_clip=0.3",))
    assert cfg.algorithm.eps_clip == 0.3


def test_an_empty_record_key_with_records_to_choose_from_is_refused() -> None:
    with pytest.raises(ConfigError, match="algorithm.policy_loss = '' .*no policy loss is named "
                                          "and no active plugin gives a default; set it to one "
                                          "of: .*ppo"):
        resolve(GRPO, ARITH, ('algorithm.policy_loss=""',))
