"""Registration hooks: each returns records that the core collects into a registry.

All of them take no argument, may return a single record, a list of records or ``None``, fire
in every process that builds a plugin manager (driver, rollout manager, engines, trainer
ranks), and are called once per process when the registries are first built.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from slime_hookspecs.markers import hookspec

if TYPE_CHECKING:
    from slime_hookspecs import records as r

# ---------------------------------------------------------------------------------------------
# components


@hookspec
def slime_register_rollout_engines() -> Iterable[r.RolloutEngineRecord] | None:
    """Register rollout engines (``rollout.engine`` names one).

    **When**: once per process, when the engine registry is first built.
    **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.RolloutEngineRecord` (or a list); ``factory(
    config, engine_index, accelerator)`` builds one engine implementing
    :class:`~slime_hookspecs.protocols.RolloutEngine`. A duplicate name is an error naming both
    plugins.

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_trainer_backends() -> Iterable[r.TrainerBackendRecord] | None:
    """Register trainer backends (``train.backend`` names one).

    **When**: once per process, when the backend registry is first built.
    **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.TrainerBackendRecord` (or a list);
    ``factory(config, rank, world_size, accelerator)`` builds a
    :class:`~slime_hookspecs.protocols.Trainer`.

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_weight_transports() -> Iterable[r.WeightTransportRecord] | None:
    """Register weight transports (``weights.transport`` names one).

    **When**: once per process. **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.WeightTransportRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_rollout_schedules() -> Iterable[r.RolloutScheduleRecord] | None:
    """Register rollout schedules (``run.rollout_mode`` names one; slime-std gives ``sync``,
    ``one_step_off`` and ``fully_async``).

    **When**: once per process, when the schedule registry is first built.
    **Process**: every process (the driver builds the schedule; the rollout manager's process
    builds its ``rollout_side``).
    **Returns**: :class:`~slime_hookspecs.records.RolloutScheduleRecord` (or a list);
    ``factory(config, args)`` builds the driver's ``slime_core.api.RolloutSchedule`` from a
    ``slime_core.api.ScheduleArgs``. A duplicate name is an error naming both plugins.

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_accelerators() -> Iterable[r.AcceleratorRecord] | None:
    """Register accelerators (``run.accelerator`` names one, ``"auto"`` picks by priority).

    **When**: once per process. **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.AcceleratorRecord` (or a list). Its ``probe``
    must not import heavy modules unguarded and must return a reason rather than raise.

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_data_sources() -> Iterable[r.DataSourceRecord] | None:
    """Register data sources (``data.source`` names one).

    **When**: once per process. **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.DataSourceRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_sandboxes() -> Iterable[r.SandboxRecord] | None:
    """Register sandboxes for tool code (``tools.sandbox`` names one).

    **When**: once per process. **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.SandboxRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_tools() -> Iterable[r.ToolRecord] | None:
    """Register tools the model may call in multi-turn rollouts (``tools.enabled`` lists them).

    **When**: once per process. **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.ToolRecord` (or a list), with the JSON
    schema of its arguments.

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_tool_parsers() -> Iterable[r.ToolParserRecord] | None:
    """Register parsers that find tool calls in model output (``tools.parser`` names one).

    **When**: once per process. **Process**: every process.
    **Returns**: :class:`~slime_hookspecs.records.ToolParserRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_loggers() -> Iterable[r.LoggerRecord] | None:
    """Register metric loggers (``run.loggers`` lists them).

    **When**: once per process. **Process**: the driver uses them.
    **Returns**: :class:`~slime_hookspecs.records.LoggerRecord` (or a list).

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------------
# algorithms


@hookspec
def slime_register_advantage_estimators() -> Iterable[r.AdvantageEstimatorRecord] | None:
    """Register advantage estimators (``algorithm.advantage_estimator`` names one).

    **When**: once per process. **Process**: every process; called on trainer rank processes.
    **Returns**: :class:`~slime_hookspecs.records.AdvantageEstimatorRecord` (or a list). The
    docstring of the function behind ``factory`` states its numeric convention.

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_policy_losses() -> Iterable[r.PolicyLossRecord] | None:
    """Register policy losses (``algorithm.policy_loss`` names one).

    **When**: once per process. **Process**: every process; called on trainer ranks.
    **Returns**: :class:`~slime_hookspecs.records.PolicyLossRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_kl_estimators() -> Iterable[r.KLEstimatorRecord] | None:
    """Register KL estimators (``algorithm.kl_estimator`` names one).

    **When**: once per process. **Process**: every process; called on trainer ranks.
    **Returns**: :class:`~slime_hookspecs.records.KLEstimatorRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_is_corrections() -> Iterable[r.ISCorrectionRecord] | None:
    """Register rollout/train mismatch corrections (``algorithm.is_correction`` names one).

    **When**: once per process. **Process**: every process; called on trainer ranks.
    **Returns**: :class:`~slime_hookspecs.records.ISCorrectionRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_loss_reducers() -> Iterable[r.LossReducerRecord] | None:
    """Register loss aggregation modes (``algorithm.loss_reducer`` names one).

    **When**: once per process. **Process**: every process; called on trainer ranks.
    **Returns**: :class:`~slime_hookspecs.records.LossReducerRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_reward_functions() -> Iterable[r.RewardFunctionRecord] | None:
    """Register reward functions (``rollout.reward`` names one).

    **When**: once per process. **Process**: every process; called in the rollout manager.
    **Returns**: :class:`~slime_hookspecs.records.RewardFunctionRecord` (or a list).

    .. versionadded:: 0.1
    """


@hookspec
def slime_register_filters() -> Iterable[r.FilterRecord] | None:
    """Register filters for dynamic sampling, the buffer and samples (by ``stage``).

    **When**: once per process. **Process**: every process; called in the rollout manager.
    **Returns**: :class:`~slime_hookspecs.records.FilterRecord` (or a list).

    .. versionadded:: 0.1
    """
