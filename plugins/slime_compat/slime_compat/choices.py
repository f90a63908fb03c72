"""slime's function paths that stand for a choice the config names: records, not hooks.

Where the project's config names the thing a slime flag replaces (``rollout.reward``,
``rollout.*_filter``, ``data.source``, ``algorithm.advantage_estimator`` / ``is_correction``
/ ``loss_reducer``), slime_compat registers a record for the flag and, in ``slime_configure``,
points the key at it when the flag is set (:func:`take_over`, through
``slime_core.api.replace_choice``). Where slime's flag works on top of the configured choice
(a dynamic-sampling filter beside ``rollout.dynamic_sampling_filter``, the estimator before
``rollout_data_postprocess_path``, a reward a custom generate function already set), the
record builds the user's choice (``replaced_choice``) and calls it as the hook did.

The resolved config says so: ``rollout.reward = "slime_custom_rm"`` and the like, and
``core`` names slime_compat's ``slime_configure`` as the source of the value.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import (
    AdvantageEstimatorRecord,
    DataSourceRecord,
    FilterRecord,
    FilterResult,
    ISCorrectionRecord,
    LossReducerRecord,
    Records,
    RewardFunctionRecord,
)

records = Records()

ADVANTAGE = "slime_custom_advantage"
TIS = "slime_custom_tis"
REDUCER = "slime_custom_pg_loss_reducer"
RM = "slime_custom_rm"
GROUP_RM = "slime_custom_group_rm"
GENERATED_RM = "slime_generated_reward"
GENERATED_GROUP_RM = "slime_generated_reward_group"
DS_FILTER = "slime_custom_dynamic_sampling_filter"
BUFFER_FILTER = "slime_custom_buffer_filter"
SAMPLE_FILTER = "slime_custom_rollout_sample_filter"
DATA_SOURCE = "slime_custom_data_source"


def _registries() -> Any:
    from slime_core.api import get_registries

    return get_registries()


def _users(config: Any, key: str) -> str:
    """The user's choice for ``key`` before slime_compat took it over (``""``: none)."""
    from slime_core.api import replaced_choice

    return replaced_choice(config, key) or ""


def _users_filter(config: Any, key: str) -> Any:
    """The filter the user named for ``key``, built; ``None`` when they named none."""
    users = _users(config, key)
    return _registries().filter.get(users).factory(config) if users else None


# -- trainer ranks ---------------------------------------------------------------------------
@records.register(AdvantageEstimatorRecord, ADVANTAGE,
                  summary="[slime].custom_advantage_function_path (else the estimator the config "
                  "chose), then rollout_data_postprocess_path; set by slime_compat")
def advantage(config: Any) -> Any:
    users = _users(config, "algorithm.advantage_estimator")

    def estimate(batch: Any) -> tuple[list[Any], Any]:
        from slime_compat.train_side import advantages

        adv = advantages(config, batch, users)
        return adv, batch.returns

    return estimate


@records.register(ISCorrectionRecord, TIS, summary="[slime].custom_tis_function_path; set by "
                  "slime_compat")
def tis(config: Any) -> Any:
    def correct(pg_loss: list[Any], train_log_probs: list[Any], rollout_log_probs: list[Any],
                loss_masks: list[Any]) -> Any:
        from slime_compat.train_side import is_correction

        return is_correction(config, pg_loss, train_log_probs, rollout_log_probs, loss_masks)

    return correct


@records.register(LossReducerRecord, REDUCER, extra={"weighting": "samples"},
                  summary="[slime].custom_pg_loss_reducer_function_path; set by slime_compat")
def reducer(config: Any, response_lengths: list[int], loss_masks: list[Any]) -> Any:
    from slime_compat.train_side import pg_loss_reducer

    return pg_loss_reducer(config, response_lengths, loss_masks)


# -- the rollout manager ---------------------------------------------------------------------
@records.register(RewardFunctionRecord, RM, summary="[slime].custom_rm_path; set by slime_compat")
def custom_rm(config: Any) -> Any:
    async def reward(sample: Any) -> Any:
        from slime_compat.rollout_side import reward as call

        return await call(config, sample)

    return reward


@records.register(RewardFunctionRecord, GROUP_RM, group=True,
                  summary="[slime].custom_rm_path with group_rm; set by slime_compat")
def custom_group_rm(config: Any) -> Any:
    async def reward(samples: list[Any]) -> Any:
        from slime_compat.rollout_side import reward_group

        return await reward_group(config, samples)

    return reward


def _users_reward(config: Any, key: str) -> tuple[Any, bool]:
    """The reward function the user named for ``key`` (``eval.reward`` falls back to
    ``rollout.reward``), built, and whether it takes the whole group."""
    name = _users(config, key)
    if not name and key == "eval.reward":
        name = _users(config, "rollout.reward") or config.rollout.reward
    record = _registries().reward_function.get(name)
    return record.factory(config), bool(record.group)


def _generated(config: Any, key: str) -> Any:
    fn, _ = _users_reward(config, key)

    def reward(sample: Any) -> Any:
        # slime keeps a reward that a custom generate function already filled in
        return sample.reward if sample.reward is not None else fn(sample)

    return reward


def _generated_group(config: Any, key: str) -> Any:
    fn, _ = _users_reward(config, key)

    async def reward(samples: list[Any]) -> list[Any]:
        todo = [s for s in samples if s.reward is None]
        from slime_compat.functions import maybe_await

        scored = iter(await maybe_await(fn(todo)) if todo else [])
        return [s.reward if s.reward is not None else next(scored) for s in samples]

    return reward


@records.register(RewardFunctionRecord, GENERATED_RM,
                  summary="a reward set by [slime].custom_generate_function_path, else the "
                  "configured reward; set by slime_compat")
def generated_reward(config: Any) -> Any:
    # rollout.reward only: an eval.reward the user set still scores evaluations
    return _generated(config, "rollout.reward")


@records.register(RewardFunctionRecord, GENERATED_GROUP_RM, group=True,
                  summary="as slime_generated_reward over a group reward; set by slime_compat")
def generated_reward_group(config: Any) -> Any:
    return _generated_group(config, "rollout.reward")


@records.register(FilterRecord, DS_FILTER, stage="dynamic_sampling",
                  summary="[slime].dynamic_sampling_filter_path (and the configured filter); "
                  "set by slime_compat")
def dynamic_sampling_filter(config: Any) -> Any:
    also = _users_filter(config, "rollout.dynamic_sampling_filter")

    def keep(group: list[Any]) -> FilterResult:
        from slime_compat.rollout_side import dynamic_filter

        out = dynamic_filter(config, group)
        if out.keep and also is not None:
            return also(group)
        return out

    return keep


@records.register(FilterRecord, BUFFER_FILTER, stage="buffer",
                  summary="[slime].buffer_filter_path; set by slime_compat")
def buffer_filter(config: Any) -> Any:
    also = _users_filter(config, "rollout.buffer_filter")

    def choose(rollout_id: int, buffer: list[list[Any]], num_groups: int) -> Any:
        from slime_compat.rollout_side import buffer_filter as call

        out = call(config, rollout_id, buffer, num_groups)
        if out is None and also is not None:
            out = also(rollout_id, buffer, num_groups)
        return out

    return choose


@records.register(FilterRecord, SAMPLE_FILTER, stage="sample",
                  summary="[slime].rollout_sample_filter_path (after the configured filter); "
                  "set by slime_compat")
def sample_filter(config: Any) -> Any:
    also = _users_filter(config, "rollout.sample_filter")

    def mark(groups: list[list[Any]]) -> None:
        from slime_compat.rollout_side import sample_filter as call

        if also is not None:
            also(groups)
        call(config, groups)

    return mark


@records.register(DataSourceRecord, DATA_SOURCE,
                  summary="[slime].data_source_path (training prompts; evaluation: the "
                  "configured source); set by slime_compat")
def data_source(config: Any, split: str) -> Any:
    from slime_compat.data_source import make

    made = make(config, split)
    if made is not None:
        return made
    users = _users(config, "data.source")
    return _registries().data_source.get(users).factory(config, split)


slime_register_advantage_estimators = records.hook(AdvantageEstimatorRecord)
slime_register_is_corrections = records.hook(ISCorrectionRecord)
slime_register_loss_reducers = records.hook(LossReducerRecord)
slime_register_reward_functions = records.hook(RewardFunctionRecord)
slime_register_filters = records.hook(FilterRecord)
slime_register_data_sources = records.hook(DataSourceRecord)


# -- slime_configure ---------------------------------------------------------------------------
def take_over(config: Any, sec: Any) -> None:
    """Point each config key whose slime flag is set at slime_compat's record."""
    from slime_core.api import replace_choice

    if sec.custom_advantage_function_path or sec.rollout_data_postprocess_path:
        replace_choice(config, "algorithm.advantage_estimator", ADVANTAGE)
    if sec.custom_tis_function_path:
        replace_choice(config, "algorithm.is_correction", TIS)
    if sec.custom_pg_loss_reducer_function_path:
        replace_choice(config, "algorithm.loss_reducer", REDUCER)
    if sec.custom_rm_path:
        name = GROUP_RM if sec.group_rm else RM
        replace_choice(config, "rollout.reward", name)
        if config.eval.reward:
            replace_choice(config, "eval.reward", name)
    elif sec.custom_generate_function_path:
        group = _registries().reward_function.get(config.rollout.reward).group
        replace_choice(config, "rollout.reward", GENERATED_GROUP_RM if group else GENERATED_RM)
    if sec.dynamic_sampling_filter_path:
        replace_choice(config, "rollout.dynamic_sampling_filter", DS_FILTER)
    if sec.buffer_filter_path:
        replace_choice(config, "rollout.buffer_filter", BUFFER_FILTER)
    if sec.rollout_sample_filter_path:
        replace_choice(config, "rollout.sample_filter", SAMPLE_FILTER)
    if sec.data_source_path:
        replace_choice(config, "data.source", DATA_SOURCE)
