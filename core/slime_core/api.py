"""The public API of ``slime-core`` for plugins: the one core module a plugin imports.

A plugin package imports ``slime_hookspecs`` (hook markers, data types, records, protocols),
this module, and third-party libraries; nothing else of ``slime_core``. Everything listed in
``__all__`` is stable across minor versions of ``slime-core`` (0.1.x): a name may gain keyword
arguments with defaults, but is not removed or changed incompatibly without a deprecation
period of one minor version. Everything else in ``slime_core`` is internal and may change in
any release. ``tests/test_conformance.py`` fails when a plugin module imports another
``slime_core`` module. The reference, with one example per group: ``docs/plugin_api.md``.

Names are resolved lazily (PEP 562), so ``import slime_core.api`` stays cheap and does not
import torch: entry-point modules may import it at module level and listing commands
(``core plugins``, ``core hooks``) still start without torch.

Groups:

* **process state**: :func:`get_manager` (this process's plugin manager: ``.hook`` to call
  hooks, ``.registries`` for records), :func:`get_registries`, :func:`run_context` /
  :class:`RunContext` (what a run's components share in this process: the rollout manager's
  engine clients, the trainer's data-parallel group), :func:`accelerator_record`
  (the record of ``run.accelerator``: device type, ``torch.distributed`` backend),
  :func:`can_retain_host_memory` (whether ``run.retain_host_memory`` can act here: glibc),
  :func:`load_run` (resolve a run's plugins and config in this process without running it).
* **choices** (one way per extension point: a plugin that changes a choice the config names
  registers a record and points the key at it): :func:`replace_choice` (in
  ``slime_configure``: set ``"rollout.reward"`` to the plugin's record, returning the user's
  choice) and :func:`replaced_choice` (the user's choice, for the record to build on);
  :func:`config_notice` (a line telling how ``slime_configure`` resolved a key, printed once
  the config has passed its checks).
The three groups **algorithm composition**, **data parallelism** and **training steps** are the
backend author's kit, :mod:`slime_core.trainkit` (the torch and megatron backends both build on
it); ``docs/plugin_api.md`` says which module of the kit each name comes from.

* **algorithm composition** (what every trainer backend calls so hooks fire identically):
  :func:`prepare_batch`, :func:`compute_advantages`, :func:`compute_loss`, :func:`make_reducer`,
  :func:`needs_ref`,
  :func:`whiten`, ``WHITEN_EPS``; on-policy distillation: :func:`opd_enabled`,
  :func:`teacher_in_trainer`, :func:`teacher_model_config`; the KL reference:
  :func:`ref_model_config` (``model.ref_path``), :func:`ref_update_due`
  (``train.ref_update_interval``).
* **data parallelism** (default ``torch.distributed`` group, or the ``group`` given): :func:`dp_active`,
  :func:`global_totals`, :func:`all_reduce_gradients`, :func:`float_all_sum`,
  :func:`sum_metrics`; :func:`data_parallel_group` / :func:`set_data_parallel_group` (the
  group the trainer of this process reduces over); how the executors make and feed the ranks:
  :func:`init_data_parallel` (the ranks' default group on a loopback store),
  :func:`shard_by_tokens` (a step's samples split across ranks, whole groups).
* **training steps**: :class:`Accumulation`, :func:`masked_tokens`, :func:`step_indices`,
  :func:`split_samples` / :func:`flat_cat` (per-sample views of one packed tensor, and
  back to it without a copy),
  :func:`rollout_optimizer_steps`, :func:`make_adamw`, :func:`optimizer_step_bytes` (what
  its next step may allocate), :func:`refresh_copy`, :class:`WeightVersions`,
  :func:`micro_batches`,
  :func:`response_log_probs`, :func:`right_pad`, :func:`response_index`,
  :func:`to_tensor_list`, :func:`lr_schedule`,
  :func:`fuse_rms_norms` (``train.fused_norm``), :func:`rms_norm`,
  :func:`causal_sdpa_applies` (a model whose mask is purely causal: SDPA, no sliding window),
  :func:`attention_implementation` (a model's attention function switched for a block),
  :class:`GraphedDecoder` (``train.cuda_graphs``: the decoder's forward and backward replayed
  from CUDA graphs at bucketed shapes), :class:`GraphCaptureOutOfMemory` (a capture that did not
  fit: the graphs are released, redo the micro-batch eagerly), :func:`graph_budget`,
  :func:`graphs_settings_conflict`, :func:`trainable_bytes`, :func:`cuda_graph_capture` (one
  capture at a time in the process: the trainer's and a rollout engine's threads); training
  health:
  :class:`TrainingHealth` (the non-finite checks that skip a step), ``SKIPPED_STEPS``,
  :func:`check_finite_weights` / :class:`NonFiniteWeightsError` (no checkpoint with NaN).
* **models**: :func:`load_causal_lm`, :func:`load_tokenizer`, :func:`resolve_dtype`,
  :func:`rollout_dtype`,
  :func:`build_value_model` (the Hugging Face critic of a ``CriticSpec``, what a backend's
  ``critic_factory`` converts so every backend starts from the same critic).
* **engines**: :class:`EngineClient` (the batching async front of a rollout engine),
  :func:`check_generate_inputs` (the input checks every engine's ``generate`` makes),
  :func:`rollout_engine_clients` (deprecated: the hook ``slime_rollout_engines_ready``),
  :func:`run_agent_api` (deprecated: moved to ``slime_agent.run_agent_api`` with the agent API);
  :func:`engine_adapter` (the ``slime_engine_adapter`` answer in this process: serve an
  adapter instead of full weights); routing replay (docs/moe.md): :func:`model_moe_shape` (an
  MoE model's layers, top-k and experts, from its config), :func:`replay_shape` (that shape
  when replay is on, refusing a model without experts, naming the engine), :func:`record_from_int32` (an engine's int32 expert ids checked
  and turned into a ``RoutedExperts``).
* **rewards**: :func:`reward_bound_error` (why a reward is refused under
  ``rollout.max_abs_reward``: every path that takes rewards from outside applies it).
* **engine and trainer internals** (slime_std: engine and trainer; what the ``local`` engine
  and the ``torch`` trainer of slime-std take from the core beyond the groups above): kernel
  choice :func:`choose_kernel` (``auto`` / ``triton`` / the torch name for a device),
  :func:`pdl_supported`; MoE routing replay on a Hugging Face model: :class:`RoutingControl`,
  :func:`config_moe_shape`, :func:`routes_to_record`, :func:`check_routes`,
  :func:`check_batch_routes`; router auxiliary losses (``train.moe_aux_loss_coef`` /
  ``moe_z_loss_coef``): :class:`RouterCapture` (every router's logits and used experts of a
  forward, and their load-balancing and z losses over the real tokens), :func:`router_losses`;
  the trainer's forward: :func:`fused_head_unsupported` (why a model's log-probs cannot take the fused
  head), :func:`shared_micro_batches` and :func:`prompt_groups` (``train.shared_prefix``),
  :func:`full_masks_supported` (whether ``train.cuda_graphs`` can replay its two passes);
  checkpoints: :func:`untie` (a state dict without shared storage, as safetensors writes),
  :func:`distinct` (one name per tensor: a tied head written once).
* **data sources and optional dependencies** (what slime-std's sources and rewards build on):
  :class:`PromptDataSource` (the prompt buffer: epochs, seeded shuffle, return buffer, resume,
  prompt templating and length filter; a source implements ``_num_rows`` and ``_row``),
  :class:`PromptRow`, :func:`json_safe`, :func:`row_problem` / :class:`BadRows` (the row
  checks and the one error naming every bad row); :func:`probe` / :func:`require` /
  :class:`MissingExtraError` (a record unavailable, or a call failing, naming what to install).
* **rollout schedules** (what slime-std's ``sync``, ``one_step_off`` and ``fully_async`` build
  on; a :class:`~slime_hookspecs.RolloutScheduleRecord`'s factory gets a :class:`ScheduleArgs`
  and builds a :class:`RolloutSchedule`; :class:`ScheduleBase` holds the quiet defaults of a
  schedule that generates nothing between steps): :class:`ScheduleCheckpoint` (what a
  checkpoint keeps of a schedule), :class:`RolloutFuture` (a submitted rollout), :func:`read_json` /
  :class:`CheckpointError` (a checkpoint's file, errors naming it); the rollout side's
  :class:`RolloutManager` (its public per-group pipeline: ``generate``, ``reward``,
  ``score_group``, ``after_generate``, ``keep_group``, ``reset_for_buffer``,
  ``finish_batch``, ``has_teacher_engine``, ``clients``), :func:`sampling_params` (a
  rollout's or an evaluation's sampling parameters from the config),
  :func:`async_buffer_groups` (``run.async_buffer_groups`` with its default).
* **errors**: :class:`UnknownRecordError`, :class:`UnavailableRecordError`,
  :class:`DuplicateRecordError`.
* **weight transports** (the machinery the transports share): :func:`call_engine_side` (a
  transport's engine side, run in the engine's process: under the ray executor through the
  engine actor's one generic entry ``weight_transport_call``), :func:`make_buckets`,
  :func:`pack_bucket` / :func:`unpack_bucket` (a bucket as one flat byte tensor),
  :func:`weights_nbytes`, :func:`engine_actor_handles` / :func:`engine_actor_ids` (the Ray
  actors behind engine facades), :func:`untie` (copies of tensors that share storage, for
  safetensors); a process group of its own (the broadcast transport's): :class:`StoreServer`,
  :func:`connect_store`, :func:`resolve_dist_host`, :func:`pin_interface`,
  :func:`new_process_group`, :func:`broadcast_tensor`, :func:`is_loopback_host`.
* **observability** (the run trace, rollout dumps and files that ``core_observe`` and
  ``core_loggers`` wire): :func:`span`, :func:`current_tracer`, :func:`start_tracer`,
  :func:`stop_tracer`, :func:`trace_sample_context`, :func:`write_run_trace`,
  :func:`trace_sub_phase` (the training step's sub-phases: ``log_probs``, ``advantages``, ...),
  ``TRACE_DRIVER_PID``, ``TRACE_SAMPLES_PID``, ``TRACE_ROLLOUT_TID``; :func:`write_dump`,
  :func:`read_dump`, :func:`list_dumps`, :func:`dump_path`, :class:`DumpError`;
  :func:`atomic_write` (a file replaced whole or not at all).
* **optional dependencies**: :func:`probe` (a record's probe: unavailable while a module is
  missing), :func:`require`, :class:`MissingExtraError` (the message names what to install).
* **testing** (from :mod:`slime_core.testing`, which tests import directly): ``TINY_QWEN2`` (a
  tiny model config for ``model.init_config``), :func:`write_char_tokenizer` (an offline
  tokenizer); ``core gpu-check`` builds its run from them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> (module, attribute): the single table of what is public, kept in the order of the
# groups above.
_EXPORTS: dict[str, tuple[str, str]] = {
    # process state
    "get_manager": ("slime_core.context", "get_manager"),
    "get_registries": ("slime_core.context", "get_registries"),
    "run_context": ("slime_core.context", "run_context"),
    "config_notice": ("slime_core.context", "config_notice"),
    "engine_adapter": ("slime_core.context", "engine_adapter"),
    "RunContext": ("slime_core.context", "RunContext"),
    "load_run": ("slime_core.session", "load_run"),
    "accelerator_record": ("slime_core.runtime.accelerator", "accelerator_record"),
    "can_retain_host_memory": ("slime_core.runtime.host_memory", "can_retain"),
    # choices
    "replace_choice": ("slime_core.config.choices", "replace_choice"),
    "replaced_choice": ("slime_core.config.choices", "replaced_choice"),
    # algorithm composition
    "compute_advantages": ("slime_core.trainkit.compose", "compute_advantages"),
    "compute_loss": ("slime_core.trainkit.compose", "compute_loss"),
    "prepare_batch": ("slime_core.trainkit.compose", "prepare_batch"),
    "make_reducer": ("slime_core.trainkit.compose", "make_reducer"),
    "needs_ref": ("slime_core.trainkit.compose", "needs_ref"),
    "opd_enabled": ("slime_core.algo.opd", "opd_enabled"),
    "teacher_in_trainer": ("slime_core.algo.opd", "teacher_in_trainer"),
    "teacher_model_config": ("slime_core.algo.opd", "teacher_model_config"),
    "ref_model_config": ("slime_core.trainkit.reference", "ref_model_config"),
    "ref_update_due": ("slime_core.trainkit.reference", "ref_update_due"),
    "whiten": ("slime_core.trainkit.whiten", "whiten"),
    "WHITEN_EPS": ("slime_core.trainkit.whiten", "WHITEN_EPS"),
    "AllSum": ("slime_core.trainkit.whiten", "AllSum"),
    # data parallelism
    "dp_active": ("slime_core.trainkit.data_parallel", "active"),
    "global_totals": ("slime_core.trainkit.data_parallel", "global_totals"),
    "all_reduce_gradients": ("slime_core.trainkit.data_parallel", "all_reduce_gradients"),
    "float_all_sum": ("slime_core.trainkit.data_parallel", "float_all_sum"),
    "sum_metrics": ("slime_core.trainkit.data_parallel", "sum_metrics"),
    "data_parallel_group": ("slime_core.trainkit.data_parallel", "data_parallel_group"),
    "set_data_parallel_group": ("slime_core.trainkit.data_parallel", "set_data_parallel_group"),
    "init_data_parallel": ("slime_core.runtime.dist_group", "init_data_parallel"),
    "shard_by_tokens": ("slime_core.executors.sharding", "shard_by_tokens"),
    # training steps
    "Accumulation": ("slime_core.trainkit.accumulate", "Accumulation"),
    "step_indices": ("slime_core.trainkit.accumulate", "step_indices"),
    "masked_tokens": ("slime_core.trainkit.accumulate", "masked_tokens"),
    "split_samples": ("slime_core.trainkit.flat", "split_samples"),
    "flat_cat": ("slime_core.trainkit.flat", "flat_cat"),
    "rollout_optimizer_steps": ("slime_core.trainkit.accumulate", "rollout_optimizer_steps"),
    "make_adamw": ("slime_core.trainkit.master", "make_adamw"),
    "optimizer_step_bytes": ("slime_core.trainkit.master", "step_bytes"),
    "refresh_copy": ("slime_core.trainkit.master", "refresh_copy"),
    "WeightVersions": ("slime_core.trainkit.master", "WeightVersions"),
    "micro_batches": ("slime_core.trainkit.batching", "micro_batches"),
    "response_log_probs": ("slime_core.trainkit.batching", "response_log_probs"),
    "right_pad": ("slime_core.trainkit.batching", "right_pad"),
    "response_index": ("slime_core.trainkit.batching", "response_index"),
    "fuse_rms_norms": ("slime_core.trainkit.fused_norm", "fuse_rms_norms"),
    "rms_norm": ("slime_core.trainkit.fused_norm", "rms_norm"),
    "causal_sdpa_applies": ("slime_core.trainkit.causal_attention", "causal_sdpa_applies"),
    "attention_implementation": ("slime_core.trainkit.causal_attention",
                                 "attention_implementation"),
    "GraphedDecoder": ("slime_core.trainkit.graphed_decoder", "GraphedDecoder"),
    "GraphCaptureOutOfMemory": ("slime_core.trainkit.graphed_decoder", "CaptureOutOfMemory"),
    "graph_budget": ("slime_core.trainkit.graphed_decoder", "graph_budget"),
    "cuda_graph_capture": ("slime_core.trainkit.capture", "cuda_graph_capture"),
    "graphs_settings_conflict": ("slime_core.trainkit.graphed_decoder", "settings_conflict"),
    "trainable_bytes": ("slime_core.trainkit.graphed_decoder", "trainable_bytes"),
    "to_tensor_list": ("slime_core.trainkit.batching", "to_tensor_list"),
    "lr_schedule": ("slime_core.trainkit.schedule", "lr_schedule"),
    "TrainingHealth": ("slime_core.trainkit.health", "TrainingHealth"),
    "SKIPPED_STEPS": ("slime_core.trainkit.health", "SKIPPED_STEPS"),
    "check_finite_weights": ("slime_core.trainkit.health", "check_finite_weights"),
    "NonFiniteWeightsError": ("slime_core.trainkit.health", "NonFiniteWeightsError"),
    # models
    "load_causal_lm": ("slime_core.models.loading", "load_causal_lm"),
    "load_tokenizer": ("slime_core.models.loading", "load_tokenizer"),
    "resolve_dtype": ("slime_core.models.loading", "resolve_dtype"),
    "rollout_dtype": ("slime_core.models.loading", "rollout_dtype"),
    "build_value_model": ("slime_core.models.value", "build_value_model"),
    # engines
    "EngineClient": ("slime_core.rollout.engine_client", "EngineClient"),
    "check_generate_inputs": ("slime_core.models.prompts", "check_generate_inputs"),
    "rollout_engine_clients": ("slime_core.context", "rollout_engine_clients"),
    "run_agent_api": ("slime_core.context", "run_agent_api"),
    "model_moe_shape": ("slime_core.moe.preflight", "model_moe_shape"),
    "replay_shape": ("slime_core.moe.preflight", "replay_shape"),
    "record_from_int32": ("slime_core.moe.routing", "record_from_int32"),
    # rewards
    "reward_bound_error": ("slime_core.rewards.validate", "reward_bound_error"),
    # slime_std: engine and trainer
    "choose_kernel": ("slime_core.kernels", "choose"),
    "pdl_supported": ("slime_core.kernels", "pdl_supported"),
    "RoutingControl": ("slime_core.moe.routing", "RoutingControl"),
    "config_moe_shape": ("slime_core.moe.routing", "config_moe_shape"),
    "routes_to_record": ("slime_core.moe.routing", "to_record"),
    "check_routes": ("slime_core.moe.routing", "check_routes"),
    "check_batch_routes": ("slime_core.moe.routing", "check_batch_routes"),
    "RouterCapture": ("slime_core.moe.losses", "RouterCapture"),
    "router_losses": ("slime_core.moe.losses", "router_losses"),
    "fused_head_unsupported": ("slime_core.trainkit.logprob_head", "unsupported"),
    "shared_micro_batches": ("slime_core.trainkit.batching", "shared_micro_batches"),
    "prompt_groups": ("slime_core.trainkit.shared_prefix", "prompt_groups"),
    "full_masks_supported": ("slime_core.trainkit.shared_prefix", "full_masks_supported"),
    "untie": ("slime_core.weights.tensors", "untie"),
    "distinct": ("slime_core.weights.tensors", "distinct"),
    # slime_std: rewards and data
    "PromptDataSource": ("slime_core.data.base", "PromptDataSource"),
    "PromptRow": ("slime_core.data.base", "PromptRow"),
    "json_safe": ("slime_core.data.jsonsafe", "json_safe"),
    "row_problem": ("slime_core.data.rowcheck", "row_problem"),
    "BadRows": ("slime_core.data.rowcheck", "BadRows"),
    "probe": ("slime_core.extras", "probe"),
    "require": ("slime_core.extras", "require"),
    "MissingExtraError": ("slime_core.extras", "MissingExtraError"),
    # rollout schedules
    "RolloutSchedule": ("slime_core.runner.schedule", "RolloutSchedule"),
    "ScheduleArgs": ("slime_core.runner.schedule", "ScheduleArgs"),
    "ScheduleBase": ("slime_core.runner.schedule", "ScheduleBase"),
    "ScheduleCheckpoint": ("slime_core.runner.schedule", "ScheduleCheckpoint"),
    "RolloutFuture": ("slime_core.executors.base", "RolloutFuture"),
    "read_json": ("slime_core.runner.checkpoint", "read_json"),
    "CheckpointError": ("slime_core.runner.checkpoint", "CheckpointError"),
    "RolloutManager": ("slime_core.rollout.manager", "RolloutManager"),
    "sampling_params": ("slime_core.rollout.manager", "sampling_params"),
    "async_buffer_groups": ("slime_core.config.sections", "async_buffer_groups"),
    # errors
    "UnknownRecordError": ("slime_core.pluginmgr.registry", "UnknownRecordError"),
    "UnavailableRecordError": ("slime_core.pluginmgr.registry", "UnavailableRecordError"),
    "DuplicateRecordError": ("slime_core.pluginmgr.registry", "DuplicateRecordError"),
    # slime_std: weights, observe, accelerators
    # weight transports
    "call_engine_side": ("slime_core.weights.engine_side", "call_engine_side"),
    "make_buckets": ("slime_core.weights.buckets", "make_buckets"),
    "pack_bucket": ("slime_core.weights.buckets", "pack_bucket"),
    "unpack_bucket": ("slime_core.weights.buckets", "unpack_bucket"),
    "weights_nbytes": ("slime_core.weights.buckets", "nbytes"),
    "engine_actor_handles": ("slime_core.weights.buckets", "actor_handles"),
    "engine_actor_ids": ("slime_core.weights.buckets", "actor_ids"),
    "StoreServer": ("slime_core.runtime.dist_group", "StoreServer"),
    "connect_store": ("slime_core.runtime.dist_group", "connect_store"),
    "resolve_dist_host": ("slime_core.runtime.dist_group", "resolve_host"),
    "pin_interface": ("slime_core.runtime.dist_group", "pin_interface"),
    "new_process_group": ("slime_core.runtime.dist_group", "new_group"),
    "broadcast_tensor": ("slime_core.runtime.dist_group", "broadcast"),
    "is_loopback_host": ("slime_core.runtime.dist_group", "is_loopback"),
    # observability
    "span": ("slime_core.observe.trace", "span"),
    "current_tracer": ("slime_core.observe.trace", "current"),
    "start_tracer": ("slime_core.observe.trace", "start"),
    "stop_tracer": ("slime_core.observe.trace", "stop"),
    "trace_sample_context": ("slime_core.observe.trace", "sample_context"),
    "write_run_trace": ("slime_core.observe.trace", "write_run_trace"),
    "trace_sub_phase": ("slime_core.observe.trace", "sub_phase"),
    "TRACE_DRIVER_PID": ("slime_core.observe.trace", "DRIVER_PID"),
    "TRACE_SAMPLES_PID": ("slime_core.observe.trace", "SAMPLES_PID"),
    "TRACE_ROLLOUT_TID": ("slime_core.observe.trace", "ROLLOUT_TID"),
    "write_dump": ("slime_core.observe.dumps", "write_dump"),
    "read_dump": ("slime_core.observe.dumps", "read_dump"),
    "list_dumps": ("slime_core.observe.dumps", "list_dumps"),
    "dump_path": ("slime_core.observe.dumps", "dump_path"),
    "DumpError": ("slime_core.observe.dumps", "DumpError"),
    "atomic_write": ("slime_core.runtime.durable", "atomic_write"),
    # testing
    "TINY_QWEN2": ("slime_core.testing", "TINY_QWEN2"),
    "write_char_tokenizer": ("slime_core.testing", "write_char_tokenizer"),
}

__all__ = list(_EXPORTS)

# Editors and mypy see the real objects (``x as x``: an explicit re-export);
# tests/test_plugin_boundary.py checks that these are exactly the exports above.
if TYPE_CHECKING:
    from slime_core.algo.opd import opd_enabled as opd_enabled
    from slime_core.algo.opd import teacher_in_trainer as teacher_in_trainer
    from slime_core.algo.opd import teacher_model_config as teacher_model_config
    from slime_core.config.choices import replace_choice as replace_choice
    from slime_core.config.choices import replaced_choice as replaced_choice
    from slime_core.config.sections import async_buffer_groups as async_buffer_groups
    from slime_core.context import RunContext as RunContext
    from slime_core.context import get_manager as get_manager
    from slime_core.context import get_registries as get_registries
    from slime_core.context import rollout_engine_clients as rollout_engine_clients
    from slime_core.context import run_agent_api as run_agent_api
    from slime_core.context import config_notice as config_notice
    from slime_core.context import engine_adapter as engine_adapter
    from slime_core.context import run_context as run_context

    # slime_std: rewards and data
    from slime_core.data.base import PromptDataSource as PromptDataSource
    from slime_core.data.base import PromptRow as PromptRow
    from slime_core.data.jsonsafe import json_safe as json_safe
    from slime_core.data.rowcheck import BadRows as BadRows
    from slime_core.data.rowcheck import row_problem as row_problem
    from slime_core.executors.base import RolloutFuture as RolloutFuture
    from slime_core.executors.sharding import shard_by_tokens as shard_by_tokens
    from slime_core.extras import MissingExtraError as MissingExtraError
    from slime_core.extras import probe as probe
    from slime_core.extras import require as require

    # slime_std: engine and trainer
    from slime_core.kernels import choose as choose_kernel  # noqa: F401 (renamed export)
    from slime_core.kernels import pdl_supported as pdl_supported
    from slime_core.models.loading import load_causal_lm as load_causal_lm
    from slime_core.models.loading import load_tokenizer as load_tokenizer
    from slime_core.models.loading import resolve_dtype as resolve_dtype
    from slime_core.models.loading import rollout_dtype as rollout_dtype
    from slime_core.models.prompts import check_generate_inputs as check_generate_inputs
    from slime_core.models.value import build_value_model as build_value_model
    from slime_core.moe.losses import RouterCapture as RouterCapture
    from slime_core.moe.losses import router_losses as router_losses
    from slime_core.moe.preflight import model_moe_shape as model_moe_shape
    from slime_core.moe.preflight import replay_shape as replay_shape
    from slime_core.moe.routing import RoutingControl as RoutingControl
    from slime_core.moe.routing import check_batch_routes as check_batch_routes
    from slime_core.moe.routing import check_routes as check_routes
    from slime_core.moe.routing import config_moe_shape as config_moe_shape
    from slime_core.moe.routing import record_from_int32 as record_from_int32
    from slime_core.moe.routing import to_record as routes_to_record  # noqa: F401 (renamed export)
    from slime_core.pluginmgr.registry import DuplicateRecordError as DuplicateRecordError
    from slime_core.pluginmgr.registry import UnavailableRecordError as UnavailableRecordError
    from slime_core.pluginmgr.registry import UnknownRecordError as UnknownRecordError
    from slime_core.rewards.validate import reward_bound_error as reward_bound_error
    from slime_core.rollout.engine_client import EngineClient as EngineClient
    from slime_core.rollout.manager import RolloutManager as RolloutManager
    from slime_core.rollout.manager import sampling_params as sampling_params
    from slime_core.runner.checkpoint import CheckpointError as CheckpointError
    from slime_core.runner.checkpoint import read_json as read_json
    from slime_core.runner.schedule import RolloutSchedule as RolloutSchedule
    from slime_core.runner.schedule import ScheduleArgs as ScheduleArgs
    from slime_core.runner.schedule import ScheduleBase as ScheduleBase
    from slime_core.runner.schedule import ScheduleCheckpoint as ScheduleCheckpoint
    from slime_core.runtime.accelerator import accelerator_record as accelerator_record
    from slime_core.runtime.host_memory import can_retain as can_retain_host_memory
    from slime_core.runtime.dist_group import init_data_parallel as init_data_parallel
    from slime_core.session import load_run as load_run
    from slime_core.testing import TINY_QWEN2 as TINY_QWEN2
    from slime_core.testing import write_char_tokenizer as write_char_tokenizer
    from slime_core.trainkit.accumulate import Accumulation as Accumulation
    from slime_core.trainkit.accumulate import rollout_optimizer_steps as rollout_optimizer_steps
    from slime_core.trainkit.accumulate import masked_tokens as masked_tokens
    from slime_core.trainkit.flat import flat_cat as flat_cat
    from slime_core.trainkit.flat import split_samples as split_samples
    from slime_core.trainkit.accumulate import step_indices as step_indices
    from slime_core.trainkit.batching import micro_batches as micro_batches
    from slime_core.trainkit.batching import response_index as response_index
    from slime_core.trainkit.batching import response_log_probs as response_log_probs
    from slime_core.trainkit.batching import right_pad as right_pad
    from slime_core.trainkit.batching import shared_micro_batches as shared_micro_batches
    from slime_core.trainkit.batching import to_tensor_list as to_tensor_list
    from slime_core.trainkit.fused_norm import fuse_rms_norms as fuse_rms_norms
    from slime_core.trainkit.fused_norm import rms_norm as rms_norm
    from slime_core.trainkit.causal_attention import causal_sdpa_applies as causal_sdpa_applies
    from slime_core.trainkit.causal_attention import (
        attention_implementation as attention_implementation,
    )
    from slime_core.trainkit.graphed_decoder import CaptureOutOfMemory as GraphCaptureOutOfMemory
    from slime_core.trainkit.graphed_decoder import GraphedDecoder as GraphedDecoder
    from slime_core.trainkit.graphed_decoder import graph_budget as graph_budget
    from slime_core.trainkit.capture import cuda_graph_capture as cuda_graph_capture
    from slime_core.trainkit.graphed_decoder import settings_conflict as graphs_settings_conflict
    from slime_core.trainkit.graphed_decoder import trainable_bytes as trainable_bytes
    from slime_core.trainkit.compose import compute_advantages as compute_advantages
    from slime_core.trainkit.compose import compute_loss as compute_loss
    from slime_core.trainkit.compose import make_reducer as make_reducer
    from slime_core.trainkit.compose import needs_ref as needs_ref
    from slime_core.trainkit.compose import prepare_batch as prepare_batch
    from slime_core.trainkit.data_parallel import active as dp_active  # noqa: F401 (renamed export)
    from slime_core.trainkit.data_parallel import all_reduce_gradients as all_reduce_gradients
    from slime_core.trainkit.data_parallel import data_parallel_group as data_parallel_group
    from slime_core.trainkit.data_parallel import float_all_sum as float_all_sum
    from slime_core.trainkit.data_parallel import global_totals as global_totals
    from slime_core.trainkit.data_parallel import set_data_parallel_group as set_data_parallel_group
    from slime_core.trainkit.data_parallel import sum_metrics as sum_metrics
    from slime_core.trainkit.health import SKIPPED_STEPS as SKIPPED_STEPS
    from slime_core.trainkit.health import NonFiniteWeightsError as NonFiniteWeightsError
    from slime_core.trainkit.health import TrainingHealth as TrainingHealth
    from slime_core.trainkit.health import check_finite_weights as check_finite_weights
    from slime_core.trainkit.logprob_head import unsupported as fused_head_unsupported  # noqa: F401
    from slime_core.trainkit.master import WeightVersions as WeightVersions
    from slime_core.trainkit.master import make_adamw as make_adamw
    from slime_core.trainkit.master import refresh_copy as refresh_copy
    from slime_core.trainkit.master import step_bytes as optimizer_step_bytes
    from slime_core.trainkit.reference import ref_model_config as ref_model_config
    from slime_core.trainkit.reference import ref_update_due as ref_update_due
    from slime_core.trainkit.schedule import lr_schedule as lr_schedule
    from slime_core.trainkit.shared_prefix import full_masks_supported as full_masks_supported
    from slime_core.trainkit.shared_prefix import prompt_groups as prompt_groups
    from slime_core.trainkit.whiten import WHITEN_EPS as WHITEN_EPS
    from slime_core.trainkit.whiten import AllSum as AllSum
    from slime_core.trainkit.whiten import whiten as whiten
    from slime_core.weights.tensors import distinct as distinct
    from slime_core.weights.tensors import untie as untie

    # slime_std: weights, observe, accelerators
    from slime_core.observe.dumps import DumpError as DumpError
    from slime_core.observe.dumps import dump_path as dump_path
    from slime_core.observe.dumps import list_dumps as list_dumps
    from slime_core.observe.dumps import read_dump as read_dump
    from slime_core.observe.dumps import write_dump as write_dump
    from slime_core.observe.trace import DRIVER_PID as TRACE_DRIVER_PID  # noqa: F401 (renamed export)
    from slime_core.observe.trace import ROLLOUT_TID as TRACE_ROLLOUT_TID  # noqa: F401 (renamed export)
    from slime_core.observe.trace import SAMPLES_PID as TRACE_SAMPLES_PID  # noqa: F401 (renamed export)
    from slime_core.observe.trace import current as current_tracer  # noqa: F401 (renamed export)
    from slime_core.observe.trace import sample_context as trace_sample_context  # noqa: F401 (renamed export)
    from slime_core.observe.trace import span as span
    from slime_core.observe.trace import start as start_tracer  # noqa: F401 (renamed export)
    from slime_core.observe.trace import sub_phase as trace_sub_phase  # noqa: F401 (renamed export)
    from slime_core.observe.trace import stop as stop_tracer  # noqa: F401 (renamed export)
    from slime_core.observe.trace import write_run_trace as write_run_trace
    from slime_core.runtime.dist_group import StoreServer as StoreServer
    from slime_core.runtime.dist_group import broadcast as broadcast_tensor  # noqa: F401 (renamed export)
    from slime_core.runtime.dist_group import connect_store as connect_store
    from slime_core.runtime.dist_group import is_loopback as is_loopback_host  # noqa: F401 (renamed export)
    from slime_core.runtime.dist_group import new_group as new_process_group  # noqa: F401 (renamed export)
    from slime_core.runtime.dist_group import pin_interface as pin_interface
    from slime_core.runtime.dist_group import resolve_host as resolve_dist_host  # noqa: F401 (renamed export)
    from slime_core.runtime.durable import atomic_write as atomic_write
    from slime_core.weights.buckets import actor_handles as engine_actor_handles  # noqa: F401 (renamed export)
    from slime_core.weights.buckets import actor_ids as engine_actor_ids  # noqa: F401 (renamed export)
    from slime_core.weights.buckets import make_buckets as make_buckets
    from slime_core.weights.buckets import nbytes as weights_nbytes  # noqa: F401 (renamed export)
    from slime_core.weights.buckets import pack_bucket as pack_bucket
    from slime_core.weights.buckets import unpack_bucket as unpack_bucket
    from slime_core.weights.engine_side import call_engine_side as call_engine_side


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(
            f"slime_core.api has no {name!r}; the public names are listed in "
            "slime_core.api.__all__ and docs/plugin_api.md"
        ) from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
