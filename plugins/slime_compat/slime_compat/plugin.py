"""Entry point of ``slime-compat``: the ``[slime]`` section and one hook or record per slime flag.

Each hook answers only when its ``[slime]`` path is set (``None`` otherwise, so the project's
defaults run). A flag that stands for a choice the config names (a reward, a filter, the data
source, the estimator, the IS correction, the reducer) is a record instead
(:mod:`slime_compat.choices`), which ``slime_configure`` names in the config when the flag is
set. Kept light: the adapters (torch, aiohttp) load on first use, and the shim
``slime`` package is only put on ``sys.path`` (:mod:`slime_compat.shim`), nothing is imported.
"""

from __future__ import annotations

import sys
from typing import Any

from slime_hookspecs import Config, ConfigSection, hookimpl

from slime_compat import shim
from slime_compat.choices import (  # noqa: F401 - the records' registration hooks
    slime_register_advantage_estimators,
    slime_register_data_sources,
    slime_register_filters,
    slime_register_is_corrections,
    slime_register_loss_reducers,
    slime_register_reward_functions,
)
from slime_compat.config import SECTION, SlimeSection

shim.install()


def _sec(config: Config) -> SlimeSection | None:
    return config.section(SECTION) if SECTION in config else None


# -- configuration ---------------------------------------------------------------------------
@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(name=SECTION, schema=SlimeSection,
                         summary="THUDM/slime function-path flags, run with slime's signatures")


@hookimpl
def slime_configure(config: Config) -> None:
    sec = _sec(config)
    if sec is None or not sec.paths() and not sec.custom_config_path:
        return
    from slime_compat.functions import check_paths

    if shim.mode() == "real":
        print(f"slime_compat: THUDM/slime is installed ({shim.real_location()}); its modules "
              "are used for slime's import names", file=sys.stderr)
        shim.adopt_real_status()
    if sec.rollout_function_path and config.run.rollout_mode == "fully_async":
        # the generator builds groups one by one through slime_generate; slime's rollout
        # function returns whole batches and would be skipped without a word
        raise ValueError(
            f"[slime].rollout_function_path ({sec.rollout_function_path}) replaces the whole "
            "training rollout, which run.rollout_mode = \"fully_async\" does not call; use "
            "run.rollout_mode = \"one_step_off\" (slime's --async), or move the per-sample "
            "part into [slime].custom_generate_function_path")
    if sec.custom_model_provider_path:
        raise ValueError("[slime].custom_model_provider_path: no trainer backend of this project "
                         "builds Megatron GPTModels through a provider (slime_make_model returns "
                         "a Hugging Face-style module); see plugins/slime_compat/README.md")
    if sec.group_rm and not sec.custom_rm_path:
        raise ValueError("[slime].group_rm needs [slime].custom_rm_path (a function scoring a "
                         "whole group)")
    if sec.custom_config_path:
        from slime_compat.args import read_custom_config

        read_custom_config(sec.custom_config_path)  # a bad YAML fails before any model loads
    check_paths(sec.paths())
    from slime_compat.choices import take_over

    take_over(config, sec)


@hookimpl
def slime_register_commands(cli: Any) -> None:
    from slime_compat.cli import slime_import

    cli.add_command(slime_import)


# -- rollout side (the rollout manager) --------------------------------------------------------
@hookimpl
def slime_rollout(config: Config, rollout_id: int, data_source: Any, evaluation: bool) -> Any:
    sec = _sec(config)
    # evaluation runs slime code only with eval_function_path: the project's eval rollout
    # (its eval set, greedy settings) is the stand-in for slime's args.eval_datasets
    if sec is None or not (sec.eval_function_path if evaluation else sec.rollout_function_path):
        return None
    from slime_compat.rollout_side import rollout

    return rollout(config, rollout_id, data_source, evaluation)


@hookimpl
def slime_generate(config: Config, sample: Any, sampling_params: Any, engine: Any) -> Any:
    sec = _sec(config)
    if sec is None or not (sec.custom_generate_function_path or sec.rollout_sample_hook_path):
        return None
    from slime_compat.rollout_side import generate

    return generate(config, sample, sampling_params, engine)


@hookimpl
def slime_rollout_all_samples(config: Config, groups: list[list[Any]], data_source: Any) -> None:
    sec = _sec(config)
    if sec is not None and sec.rollout_all_samples_process_path:
        from slime_compat.rollout_side import all_samples

        all_samples(config, groups, data_source)


# -- driver: conversion and logs -----------------------------------------------------------------
@hookimpl
def slime_reward_post_process(config: Config, samples: list[Any]) -> Any:
    sec = _sec(config)
    if sec is None or not sec.custom_reward_post_process_path:
        return None
    from slime_compat.train_side import reward_post_process

    return reward_post_process(config, samples)


@hookimpl
def slime_convert_samples_to_train_data(config: Config, samples: list[Any]) -> Any:
    sec = _sec(config)
    if sec is None or not sec.custom_convert_samples_to_train_data_path:
        return None
    from slime_compat.train_side import convert

    return convert(config, samples)


@hookimpl
def slime_before_train(config: Config, rollout_id: int) -> None:
    sec = _sec(config)
    if sec is not None and sec.rollout_data_postprocess_path:
        from slime_compat.runtime import runtime

        runtime(config).step = rollout_id  # the rollout id slime's postprocess receives


@hookimpl
def slime_log_rollout(config: Config, rollout_id: int, samples: list[Any], metrics: dict[str, float]) -> Any:
    sec = _sec(config)
    if sec is None or not sec.custom_rollout_log_function_path:
        return None
    from slime_compat.logs import log_rollout

    return log_rollout(config, rollout_id, samples, metrics)


@hookimpl
def slime_log_eval(config: Config, rollout_id: int, samples: list[Any], metrics: dict[str, float]) -> Any:
    sec = _sec(config)
    if sec is None or not sec.custom_eval_rollout_log_function_path:
        return None
    from slime_compat.logs import log_eval

    return log_eval(config, rollout_id, samples, metrics)


@hookimpl
def slime_run_end(config: Config, run_dir: str, status: str) -> None:
    from slime_compat.runtime import shutdown

    shutdown()


# -- trainer ranks ------------------------------------------------------------------------------
@hookimpl
def slime_loss(config: Config, batch: Any, log_probs: list[Any], reducer: Any) -> Any:
    sec = _sec(config)
    if sec is None or not sec.custom_loss_function_path:
        return None
    from slime_compat.train_side import loss

    return loss(config, batch, log_probs, reducer)


@hookimpl
def slime_trainer_init(config: Config, model: Any) -> None:
    sec = _sec(config)
    if sec is not None and sec.custom_megatron_init_path:
        from slime_compat.train_side import trainer_init

        trainer_init(config, model)


@hookimpl
def slime_before_log_prob(config: Config, model: Any, role: str) -> None:
    sec = _sec(config)
    if sec is not None and sec.custom_megatron_before_log_prob_hook_path:
        from slime_compat.train_side import before_log_prob

        before_log_prob(config, model, role)


@hookimpl
def slime_before_train_step(config: Config, rollout_id: int, step_id: int, model: Any,
                            optimizer: Any, scheduler: Any) -> None:
    sec = _sec(config)
    if sec is not None and sec.custom_megatron_before_train_step_hook_path:
        from slime_compat.train_side import before_train_step

        before_train_step(config, rollout_id, step_id, model, optimizer, scheduler)


@hookimpl
def slime_after_weights_written(config: Config, version_dir: str, engines: list[Any]) -> None:
    sec = _sec(config)
    if sec is not None and sec.custom_update_weight_post_write_path:
        from slime_compat.train_side import after_weights_written

        after_weights_written(config, version_dir, engines)
