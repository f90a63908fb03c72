"""Per-call customization hooks: one per function-path flag of THUDM/slime.

``firstresult`` hooks stop at the first implementation that returns something other than
``None``; the core's built-in implementation is registered ``trylast`` so any plugin wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from slime_hookspecs.markers import hookspec

if TYPE_CHECKING:
    from slime_hookspecs.batch import TrainBatch
    from slime_hookspecs.config import Config
    from slime_hookspecs.protocols import (
        DataSource,
        EngineAdapter,
        RolloutEngine,
        RolloutResult,
    )
    from slime_hookspecs.records import FilterResult
    from slime_hookspecs.sample import Sample
    from slime_hookspecs.sampling import SamplingParams

# ---------------------------------------------------------------------------------------------
# rollout


@hookspec(firstresult=True)
def slime_rollout(
    config: Config, rollout_id: int, data_source: DataSource, evaluation: bool
) -> RolloutResult | None:
    """Produce the samples of one rollout step (slime's ``--rollout-function-path``).

    **When**: once per rollout step, and once per evaluation with ``evaluation=True``.
    **Process**: the rollout manager.
    **Args**: ``rollout_id`` -- the step index; ``data_source`` -- the data buffer (train or
    eval source); ``evaluation`` -- True for held-out evaluation (no filters, no buffer).
    **Returns**: a :class:`~slime_hookspecs.protocols.RolloutResult` whose groups are complete
    and rewarded, or ``None`` to defer. firstresult: stops at the first non-``None`` result; the
    built-in rollout (generate, reward, dynamic sampling, filters) is ``trylast``.

    With ``run.rollout_mode = "fully_async"`` training groups do not come from this hook: the
    rollout manager's continuous generator runs the per-sample and per-group hooks
    (``slime_generate``, rewards, ``slime_after_generate``, filters) itself and fills a buffer
    the steps take from; only evaluations (``evaluation=True``) call it.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_generate(
    config: Config, sample: Sample, sampling_params: SamplingParams, engine: RolloutEngine
) -> Sample | list[Sample] | None:
    """Generate the response of one sample (``--custom-generate-function-path``).

    **When**: for each pending sample of a rollout.
    **Process**: the rollout manager (it calls ``engine`` remotely under the ray executor).
    **Args**: ``sample`` -- PENDING, with prompt ``tokens``; ``engine`` -- a rollout engine to
    call ``generate`` on (token ids in, token ids + log-probs out).
    **Returns**: the finished sample (``status`` COMPLETED / TRUNCATED / ABORTED / FAILED,
    response appended through ``Sample.append_response_tokens``), a list of samples sharing its
    ``rollout_id`` (multi-agent / tree rollouts), or ``None`` to defer. May be a coroutine
    function. firstresult; the single-turn built-in is ``trylast``.

    .. versionadded:: 0.1
    """


@hookspec
def slime_after_generate(config: Config, sample: Sample, rollout_id: int, evaluation: bool) -> None:
    """Observe or edit a sample right after it is generated and rewarded.

    **When**: once per finished sample, after its reward is set, before group filters.
    With ``run.rollout_mode = "fully_async"``, when its group completes in the continuous
    generator; ``rollout_id`` is then the step the trainer is on at that moment (the sample
    is trained in that step or a later one; ``sample.rollout_id`` is set when it is taken).
    **Process**: the rollout manager.
    **Args**: ``sample`` -- may be modified in place (metadata, reward, ``remove_sample``).
    **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_reward(config: Config, sample: Sample) -> float | dict[str, float] | None:
    """Score one sample (``--custom-rm-path``), overriding ``rollout.reward``.

    **When**: once per finished sample that is not FAILED.
    **Process**: the rollout manager.
    **Returns**: a float, a dict of floats (``rollout.reward_key`` picks the scalar), or ``None``
    to let the configured reward function score it. May be a coroutine function. An exception
    marks the sample FAILED with the reason; the step continues unless every sample failed.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register a :class:`~slime_hookspecs.records.RewardFunctionRecord` and name it in
       ``rollout.reward`` (a plugin that changes the run's reward points the key at its record
       in ``slime_configure`` with ``slime_core.api.replace_choice``, and builds on the user's
       choice from ``replaced_choice``). Still called first; the core warns once per plugin.
    """


@hookspec(firstresult=True)
def slime_reward_group(config: Config, samples: list[Sample]) -> list[float] | None:
    """Score a whole group at once (group reward models, pairwise judges).

    **When**: once per finished group, before per-sample rewards; if it returns a list, the
    per-sample ``slime_reward`` is skipped for that group.
    **Process**: the rollout manager.
    **Returns**: one reward per sample in order, or ``None``. May be a coroutine function.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register a :class:`~slime_hookspecs.records.RewardFunctionRecord` with
       ``group=True``, named in ``rollout.reward`` (a plugin that changes the run's choice
       points the key at its record in ``slime_configure`` with
       ``slime_core.api.replace_choice``). Still called where it was; the core warns once
       per plugin.
    """


@hookspec
def slime_dynamic_sampling_filter(config: Config, group: list[Sample]) -> FilterResult | None:
    """Decide whether a rewarded group is kept (``--dynamic-sampling-filter-path``).

    **When**: for each rewarded group during a training rollout (not evaluation).
    **Process**: the rollout manager.
    **Returns**: :class:`~slime_hookspecs.records.FilterResult`; the group is dropped when any
    implementation says ``keep=False`` (reasons are counted in the metrics as
    ``rollout/dropped/<reason>``). ``None`` abstains. When groups are dropped the rollout draws
    more prompts until the batch is full (over-sampling) and aborts the surplus.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register a :class:`~slime_hookspecs.records.FilterRecord` with
       ``stage="dynamic_sampling"``, named in ``rollout.dynamic_sampling_filter`` (a plugin
       that changes the run's choice points the key at its record in ``slime_configure``
       with ``slime_core.api.replace_choice``). Still called where it was; the core warns
       once per plugin.
    """


@hookspec(firstresult=True)
def slime_buffer_filter(
    config: Config, rollout_id: int, buffer: list[list[Sample]], num_groups: int
) -> list[list[Sample]] | None:
    """Choose which buffered groups to hand out next (``--buffer-filter-path``).

    **When**: when the data source has groups in its return buffer (aborted or partial).
    **Process**: the rollout manager.
    **Args**: ``buffer`` -- the buffered groups; remove the ones you return from it.
    **Returns**: up to ``num_groups`` groups, or ``None`` for first-in first-out.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register a :class:`~slime_hookspecs.records.FilterRecord` with ``stage="buffer"``,
       named in ``rollout.buffer_filter`` (a plugin that changes the run's choice points the
       key at its record in ``slime_configure`` with ``slime_core.api.replace_choice``).
       Still called where it was; the core warns once per plugin.
    """


@hookspec
def slime_rollout_sample_filter(config: Config, groups: list[list[Sample]]) -> None:
    """Mark samples to leave out of the loss (``--rollout-sample-filter-path``).

    **When**: after a rollout step's groups are complete, before conversion to train data
    (fully-async mode: on the groups a step takes from the buffer).
    **Process**: the rollout manager.
    **Args**: ``groups`` -- set ``sample.remove_sample = True`` to zero its loss mask; the sample
    still counts in reward normalisation of its group.
    **Returns**: nothing.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register a :class:`~slime_hookspecs.records.FilterRecord` with ``stage="sample"``,
       named in ``rollout.sample_filter`` (a plugin that changes the run's choice points the
       key at its record in ``slime_configure`` with ``slime_core.api.replace_choice``).
       Still called where it was; the core warns once per plugin.
    """


@hookspec
def slime_rollout_all_samples(
    config: Config, groups: list[list[Sample]], data_source: DataSource
) -> None:
    """See every sample of a rollout step, kept or dropped (``--rollout-all-samples-process-path``).

    **When**: at the end of each training rollout step (fully-async mode: when a step takes
    its groups from the buffer; ``groups`` are those and the ones dynamic sampling dropped
    since the previous step; the generator does not touch the data source meanwhile).
    **Process**: the rollout manager.
    **Args**: ``groups`` -- all groups generated this step, including dropped ones (their
    samples carry ``metadata["dropped_reason"]``).
    **Returns**: nothing.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------------
# conversion to training data


@hookspec(firstresult=True)
def slime_reward_post_process(
    config: Config, samples: list[Sample]
) -> tuple[list[float], list[float]] | None:
    """Turn sample rewards into the rewards used for advantages (``--custom-reward-post-process-path``).

    **When**: once per training step, on the kept samples in group order.
    **Process**: the driver.
    **Returns**: ``(raw_rewards, shaped_rewards)``, one float each per sample, or ``None`` for
    the default (raw = shaped = the scalar reward; group normalisation is the estimator's job).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_convert_samples_to_train_data(config: Config, samples: list[Sample]) -> TrainBatch | None:
    """Build the :class:`~slime_hookspecs.batch.TrainBatch` of a step.

    **When**: once per training step (``--custom-convert-samples-to-train-data-path``).
    **Process**: the driver.
    **Returns**: a batch, or ``None`` for the default conversion (tokens, loss masks with
    removed samples zeroed, rewards via ``slime_reward_post_process``, rollout log-probs).

    .. versionadded:: 0.1
    """


@hookspec
def slime_rollout_data_postprocess(config: Config, rollout_id: int, batch: TrainBatch) -> None:
    """Edit the train batch in place before it reaches the trainer (``--rollout-data-postprocess-path``).

    **When**: once per training step, after conversion.
    **Process**: the driver.
    **Returns**: nothing; change ``batch`` fields (e.g. loss masks) in place, keeping lengths.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_make_data_source(config: Config, split: str) -> DataSource | None:
    """Build the data source (``--data-source-path``), overriding ``data.source``.

    **When**: once per run for ``split="train"`` and, if evaluation is configured, ``"eval"``.
    **Process**: the rollout manager.
    **Returns**: a :class:`~slime_hookspecs.protocols.DataSource`, or ``None`` to use the
    registered source named by the config.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register a :class:`~slime_hookspecs.records.DataSourceRecord`, named in
       ``data.source`` (a plugin that changes the run's choice points the key at its record
       in ``slime_configure`` with ``slime_core.api.replace_choice``). Still called where it
       was; the core warns once per plugin.
    """


# ---------------------------------------------------------------------------------------------
# training


@hookspec(firstresult=True)
def slime_compute_advantages(config: Config, batch: TrainBatch) -> list[Any] | None:
    """Compute per-token advantages (``--custom-advantage-function-path``).

    **When**: once per training step, after log-probs (policy, old, ref) and values are set on
    ``batch``.
    **Process**: each trainer rank, on its share of the batch (groups are never split); under
    data parallelism every rank calls it each step, also with an empty share, so an
    implementation may use collectives on the default process group (batch-wide statistics).
    **Returns**: a list with one 1-D tensor per sample over its response, or ``None`` to use
    ``algorithm.advantage_estimator``. May also set ``batch.returns``, and put float metrics
    in the dict ``batch.metadata["metrics"]``: the trainer merges them into the step's
    training metrics (a critic's value loss, for example).

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register an :class:`~slime_hookspecs.records.AdvantageEstimatorRecord`, named in
       ``algorithm.advantage_estimator`` (a plugin that changes the run's choice points the
       key at its record in ``slime_configure`` with ``slime_core.api.replace_choice``).
       Still called where it was; the core warns once per plugin.
    """


@hookspec(firstresult=True)
def slime_loss(
    config: Config, batch: TrainBatch, log_probs: list[Any], reducer: Callable[[list[Any]], Any]
) -> tuple[Any, dict[str, float]] | None:
    """Replace the whole loss of one micro-batch (``--custom-loss-function-path``).

    Not the way to supply a policy loss: that is a
    :class:`~slime_hookspecs.records.PolicyLossRecord` named in ``algorithm.policy_loss``,
    whose per-token loss the core then corrects, masks, reduces and combines with the KL and
    entropy terms. This hook stands in for all of that composition (the SFT loss too), which no
    config key names: slime's custom loss (given the reducer, returning the scalar) and a
    plugin that must override whatever loss is configured (slime_ppo's critic-only warm-up).

    **When**: for every micro-batch of every optimizer step.
    **Process**: each trainer rank.
    **Args**: ``batch`` -- the micro-batch (advantages, old/ref/rollout log-probs set);
    ``log_probs`` -- current per-sample response log-probs, with gradient;
    ``reducer`` -- aggregates a list of per-token losses to a scalar (``algorithm.loss_reducer``).
    **Returns**: ``(loss, metrics)`` with a scalar tensor that ``backward()`` is called on, or
    ``None`` to use ``algorithm.policy_loss``.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_make_model(config: Config, role: str) -> Any | None:
    """Build a model (``--custom-model-provider-path``).

    **When**: when a trainer builds its models. **Process**: each trainer rank.
    **Args**: ``role`` -- ``"actor"``, ``"ref"`` or ``"critic"``.
    **Returns**: a ``torch.nn.Module`` whose forward takes ``input_ids`` (and optional
    ``position_ids``) and returns an object with ``.logits`` (critic: values), or ``None`` for
    the backend's default loader.
    **Megatron backend** (``train.backend = "megatron"``): return a megatron-core module with
    ``GPTModel``'s parameter names and forward (``input_ids, position_ids, attention_mask`` ->
    logits ``[batch, seq, vocab]``), built for this rank's parallel state (slime's
    ``--custom-model-provider-path``); the backend then loads this rank's shard of the
    ``[model]`` checkpoint into it. ``None``: the backend's ``GPTModel`` (local layer spec).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_is_correction(
    config: Config,
    pg_loss: list[Any],
    train_log_probs: list[Any],
    rollout_log_probs: list[Any],
    loss_masks: list[Any],
) -> tuple[list[Any], list[Any], dict[str, float]] | None:
    """Correct the policy loss for the rollout/train mismatch (``--custom-tis-function-path``).

    **When**: per micro-batch, after the per-token policy loss, before reduction, when
    ``algorithm.is_correction`` is set or an implementation exists.
    **Process**: each trainer rank.
    **Returns**: ``(pg_loss, loss_masks, metrics)`` per-sample lists, or ``None`` for the
    configured registry entry.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register an :class:`~slime_hookspecs.records.ISCorrectionRecord`, named in
       ``algorithm.is_correction`` (a plugin that changes the run's choice points the key at
       its record in ``slime_configure`` with ``slime_core.api.replace_choice``). Still
       called where it was; the core warns once per plugin.
    """


@hookspec(firstresult=True)
def slime_pg_loss_reducer(
    config: Config, response_lengths: list[int], loss_masks: list[Any]
) -> Callable[[list[Any]], Any] | None:
    """Provide the loss aggregation of a micro-batch (``--custom-pg-loss-reducer-function-path``).

    **When**: per micro-batch. **Process**: each trainer rank.
    **Returns**: a callable mapping a list of per-token loss tensors to a scalar, or ``None``
    for ``algorithm.loss_reducer``.

    .. versionadded:: 0.1
    .. deprecated:: 0.1
       Register a :class:`~slime_hookspecs.records.LossReducerRecord`, named in
       ``algorithm.loss_reducer`` (a plugin that changes the run's choice points the key at
       its record in ``slime_configure`` with ``slime_core.api.replace_choice``). Still
       called where it was; the core warns once per plugin.
    """


@hookspec
def slime_trainer_init(config: Config, model: Any) -> None:
    """Observe or adjust the actor model after it is built (Megatron init hook).

    **When**: once per trainer rank after the actor model and optimizer exist.
    **Process**: each trainer rank. **Args**: ``model`` -- the ``torch`` backend passes its
    ``torch.nn.Module``; the ``megatron`` backend passes slime's Megatron model list (one
    ``GPTModel`` chunk per virtual pipeline stage: a one-element list), as slime's
    ``--custom-megatron-init-path`` receives it; the list also has ``parameters()`` over every
    chunk, so code that only asks a model for its parameters or device runs on both.
    **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_before_log_prob(config: Config, model: Any, role: str) -> None:
    """Called before log-probs are computed with ``model`` for ``role`` (actor, ref, teacher,
    old_actor).

    **When**: once per role per training step (``old_actor``: once per weight version among the
    batch's samples, ``model`` holding that version's weights; ``train.keep_old_actor``).
    **Process**: each trainer rank.
    **Args**: ``model`` -- the ``torch`` backend's module; the ``megatron`` backend's model list
    of that role (``[GPTModel]``; ref: the frozen reference), as slime's
    ``--custom-megatron-before-log-prob-hook-path`` receives it. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_before_train_step(
    config: Config, rollout_id: int, step_id: int, model: Any, optimizer: Any, scheduler: Any
) -> None:
    """Called before each optimizer step's forward/backward.

    **When**: ``step_id`` counts optimizer steps within rollout ``rollout_id``.
    **Process**: each trainer rank. **Args**: ``torch`` backend: its module, AdamW and
    ``LambdaLR``; ``megatron`` backend: the model list (``[GPTModel]``), this rank's AdamW over
    its tensor-parallel shards and its ``LambdaLR``, as slime's
    ``--custom-megatron-before-train-step-hook-path`` receives model, optimizer and scheduler.
    **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_trainer_save(config: Config, path: str, rank: int) -> None:
    """Save plugin-owned training state (a critic, extra optimizers) with a checkpoint.

    **When**: inside ``Trainer.save``, after the backend wrote its own state; ``path`` is the
    checkpoint's temporary directory, renamed atomically once everything is written, so a
    crash here leaves the previous checkpoint intact.
    **Process**: each trainer rank (``rank``); write rank-specific files or only on rank 0.
    The ``megatron`` backend calls it on every rank after writing ``megatron/`` (per-rank
    shards, optimizer and RNG) and ``hf/``; ``rank`` is the global rank.
    **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_trainer_load(config: Config, path: str, rank: int) -> None:
    """Restore what ``slime_trainer_save`` wrote, when a run resumes.

    **When**: inside ``Trainer.load``, after the backend restored its own state (``megatron``
    backend: this rank's shard, optimizer, scheduler and RNG).
    **Process**: each trainer rank. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_trainer_weights(config: Config, model: Any) -> dict[str, Any] | None:
    """Choose the tensors a trainer exports to the engines and writes to its checkpoints.

    For a model of which only part trains (LoRA adapters on a frozen base): the rest stays
    as the ``[model]`` section loads it, in the engines as in the trainer, so only the trained
    part has to travel and be saved.

    **When**: at every weight sync (``Trainer.export_weights``, the run's first sync
    included) and at every checkpoint (``Trainer.save``); first result wins.
    **Process**: each trainer rank (rank 0's answer is what the engines get).
    **Args**: ``model`` -- the ``torch`` backend's module (what ``slime_make_model`` returned).
    **Returns**: a mapping name -> tensor, every name one of ``model.state_dict()``'s (a
    checkpoint is loaded back with ``load_state_dict(strict=False)``): the transports send
    exactly these (``perf/weight_sync_bytes`` counts them) and the checkpoint's
    ``model.safetensors`` holds exactly these. The engines receive names their base model
    lacks, so a plugin that answers here also implements :func:`slime_engine_weights` (engines
    that merge, ``local``) and :func:`slime_engine_adapter` (engines that serve LoRA adapters
    themselves, ``vllm``). ``None``: the whole state dict (every built-in model).
    The ``megatron`` backend does not call it (it exports HF-named full weights).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_engine_weights(config: Config, model: Any, weights: Mapping[str, Any],
                         version: int) -> Mapping[str, Any] | None:
    """Turn the tensors a weight sync delivered into weights of the engine's own model.

    The counterpart of :func:`slime_trainer_weights` (adapter tensors in, the merged
    ``base + delta`` of each adapted layer out).

    **When**: inside the ``local`` engine's ``update_weights``, under its lock, before any
    name or shape is checked and before anything is copied, once per delivered version
    (every transport ends in ``update_weights``; a disk delta is applied to the transported
    tensors first, so ``weights`` is always the full set of that version).
    **Process**: the engine's process (the driver under the local executor, the engine actor
    under Ray). **Args**: ``model`` -- the engine's ``torch.nn.Module`` (its
    ``state_dict()`` names are what the result must use); ``weights`` -- name -> tensor as
    sent, not to be modified (the disk transport keeps them as the base of the next delta);
    ``version`` -- the weight version being applied.
    **Returns**: name -> tensor with the engine model's own names and shapes, which the engine
    then checks and copies in as usual; ``None``: ``weights`` as they are (every built-in
    transport's full weights). An exception fails the sync naming the engine and version.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def slime_engine_adapter(config: Config) -> EngineAdapter | None:
    """Describe the LoRA adapter this run's weight syncs carry, to an engine that serves
    adapters natively instead of merging them.

    The counterpart of :func:`slime_trainer_weights` for engines with their own LoRA support
    (vLLM's ``enable_lora`` + ``LoRARequest``): they keep the base model as loaded and apply
    every synced version as a new adapter, where the ``local`` engine merges it
    (:func:`slime_engine_weights`).

    **When**: once when such an engine is built, before its model loads (LoRA slots are
    reserved at start-up); its ``write`` is then called at every weight sync, under the
    engine's lock, before the engine changes anything.
    **Process**: the engine's process (the driver under the local executor, the engine actor
    under Ray). **Returns**: an :class:`~slime_hookspecs.protocols.EngineAdapter` (rank,
    alpha, target modules, and ``write(weights, path)`` that turns one sync's tensors into a
    PEFT adapter directory); ``None``: weight syncs carry the model's own weights (every run
    without a LoRA plugin), which the engine loads as usual. first result wins.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------------
# weights


@hookspec
def slime_after_weights_written(config: Config, version_dir: str, engines: list[Any]) -> None:
    """Called after the disk transport wrote a weight version (``--custom-update-weight-post-write-path``).

    **When**: after the versioned directory is complete, before engines are told to read it;
    once per directory: with ``weights.delta`` a sync writes a delta directory
    (``delta-v<version>``) and, for engines that need it (a refused delta, an engine that
    loads files itself), the full one (``v<version>``), each announced here.
    **Process**: the trainer rank that wrote it (rank 0).
    **Returns**: nothing (e.g. copy the directory to shared storage).

    .. versionadded:: 0.1
    """


@hookspec
def slime_before_weights_read(version_dir: str, target_version: int) -> None:
    """Called on the engine side before it reads a weight version from disk.

    **When**: once per engine per directory it reads (a refused delta version is followed by
    the full one), fired by the ``disk`` transport's engine side (engines do not fire it)
    before the engine is told to load ``version_dir``.
    **Process**: the engine's process (its actor under the ray executor).
    **Returns**: nothing (e.g. fetch the directory).

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------------
# logging


@hookspec
def slime_log_rollout(
    config: Config, rollout_id: int, samples: list[Sample], metrics: dict[str, float]
) -> bool | None:
    """Log a training rollout step (custom rollout log function).

    **When**: after each training rollout, before the metrics are written.
    **Process**: the driver.
    **Args**: ``metrics`` -- may be extended in place (the additions are logged).
    **Returns**: ``True`` to say it handled the sample logging (the built-in sample preview is
    skipped); ``None``/``False`` otherwise. Metrics are always written.

    .. versionadded:: 0.1
    """


@hookspec
def slime_log_eval(
    config: Config, rollout_id: int, samples: list[Sample], metrics: dict[str, float]
) -> bool | None:
    """Log an evaluation (custom eval log function); same contract as ``slime_log_rollout``.

    **When**: after each evaluation. **Process**: the driver.

    .. versionadded:: 0.1
    """
