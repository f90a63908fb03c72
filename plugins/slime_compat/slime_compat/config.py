"""The ``[slime]`` section: slime's function-path flags under their own names (dashes -> underscores).

Every path is a dotted import path resolved with slime's rule (``module.sub.func``, see
:mod:`slime_compat.functions`). An empty string means "not set" (slime's ``None``).
``FLAGS`` is the single table of what each key means here: the hook it runs through and the
signature it is called with, as in THUDM/slime (``slime/utils/arguments.py`` and the call sites
named in the README).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

SECTION = "slime"
ENDPOINT_MODES = ("auto", "on", "off")

# slime's --advantage-estimator names whose record here has another name: slime calls GAE with
# a critic "ppo", slime_ppo registers that estimator as "gae" (the policy loss is "ppo")
ESTIMATOR_RECORDS: dict[str, str] = {"ppo": "gae"}
SLIME_ESTIMATORS: dict[str, str] = {record: slime for slime, record in ESTIMATOR_RECORDS.items()}


@dataclass(frozen=True)
class Flag:
    hook: str
    signature: str


FLAGS: dict[str, Flag] = {
    "custom_rm_path": Flag("slime_reward / slime_reward_group (group_rm)",
                           "custom_rm(args, sample) -> float | dict; group_rm: (args, samples) -> list"),
    "custom_generate_function_path": Flag("slime_generate",
                                          "async generate(args, sample, sampling_params[, evaluation]) -> Sample | list[Sample]"),
    "rollout_function_path": Flag("slime_rollout",
                                  "generate_rollout(args, rollout_id, data_source, evaluation=False) -> list[list[Sample]] | RolloutFnTrainOutput | RolloutFnEvalOutput"),
    "eval_function_path": Flag("slime_rollout (evaluation=True)", "as rollout_function_path"),
    "rollout_sample_hook_path": Flag("slime_generate (after generation, before reward)",
                                     "hook(args, sample, *, rollout_id=None, evaluation=False) -> Sample | None"),
    "dynamic_sampling_filter_path": Flag("slime_dynamic_sampling_filter",
                                         "filter(args, samples) -> DynamicFilterOutput | bool"),
    "buffer_filter_path": Flag("slime_buffer_filter",
                               "buffer_filter(args, rollout_id, buffer, num_samples) -> list[list[Sample]]"),
    "rollout_sample_filter_path": Flag("slime_rollout_sample_filter", "filter(args, samples) -> None"),
    "rollout_all_samples_process_path": Flag("slime_rollout_all_samples",
                                             "process(args, all_samples, data_source) -> None"),
    "custom_reward_post_process_path": Flag("slime_reward_post_process",
                                            "post_process(args, samples) -> (raw_rewards, rewards)"),
    "custom_convert_samples_to_train_data_path": Flag("slime_convert_samples_to_train_data",
                                                      "convert(args, samples) -> dict"),
    "rollout_data_postprocess_path": Flag("slime_compute_advantages (after the advantages)",
                                          "postprocess(args, rollout_id, rollout_data) -> None"),
    "custom_advantage_function_path": Flag("slime_compute_advantages",
                                           "custom_fn(args, rollout_data) -> None (sets advantages, returns)"),
    "data_source_path": Flag("slime_make_data_source", "DataSourceClass(args)"),
    "custom_loss_function_path": Flag("slime_loss",
                                      "loss(args, batch, logits, sum_of_sample_mean) -> (loss, metrics)"),
    "custom_tis_function_path": Flag("slime_is_correction",
                                     "tis(args=, pg_loss=, train_log_probs=, rollout_log_probs=, loss_masks=, total_lengths=, response_lengths=) -> (pg_loss, masks, metrics)"),
    "custom_pg_loss_reducer_function_path": Flag("slime_pg_loss_reducer",
                                                 "make(total_lengths, response_lengths, loss_masks, calculate_per_token_loss) -> reducer"),
    "custom_rollout_log_function_path": Flag("slime_log_rollout",
                                             "log(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool"),
    "custom_eval_rollout_log_function_path": Flag("slime_log_eval",
                                                  "log(rollout_id, args, data, extra_metrics) -> bool"),
    "custom_update_weight_post_write_path": Flag("slime_after_weights_written",
                                                 "hook(args, version_dir, rollout_engines) -> None"),
    "custom_megatron_init_path": Flag("slime_trainer_init", "init(args) -> None"),
    "custom_megatron_before_log_prob_hook_path": Flag("slime_before_log_prob",
                                                      "hook(args, model, store_prefix) -> None"),
    "custom_megatron_before_train_step_hook_path": Flag("slime_before_train_step",
                                                        "hook(args, rollout_id, step_id, model, optimizer, opt_param_scheduler) -> None"),
    "custom_model_provider_path": Flag("slime_make_model (megatron backend only)",
                                       "provider(pre_process, post_process, vp_stage=None) -> GPTModel"),
}


@dataclass
class SlimeSection:
    """slime's flags; see ``FLAGS`` and plugins/slime_compat/README.md."""

    custom_rm_path: str = ""  # custom_rm(args, sample) -> float (group_rm: a list per group)
    group_rm: bool = False  # custom_rm_path scores a whole group at once
    custom_generate_function_path: str = ""  # async generate(args, sample, sampling_params)
    rollout_function_path: str = ""  # generate_rollout(args, rollout_id, data_source, evaluation)
    eval_function_path: str = ""  # empty: the project's eval rollout (see README)
    rollout_sample_hook_path: list[str] = field(default_factory=list)  # after generate, before reward
    dynamic_sampling_filter_path: str = ""  # filter(args, samples) -> DynamicFilterOutput
    buffer_filter_path: str = ""  # filter(args, rollout_id, buffer, num_samples)
    rollout_sample_filter_path: str = ""  # filter(args, samples): sets remove_sample
    rollout_all_samples_process_path: str = ""  # process(args, all_samples, data_source)
    custom_reward_post_process_path: str = ""  # (args, samples) -> (raw_rewards, rewards)
    custom_convert_samples_to_train_data_path: str = ""  # (args, samples) -> train-data dict
    rollout_data_postprocess_path: str = ""  # (args, rollout_id, rollout_data), after advantages
    custom_advantage_function_path: str = ""  # (args, rollout_data): sets advantages, returns
    data_source_path: str = ""  # a data source class built as cls(args)
    custom_loss_function_path: str = ""  # (args, batch, logits, sum_of_sample_mean)
    custom_tis_function_path: str = ""  # (args=, pg_loss=, train_log_probs=, ...) keywords
    custom_pg_loss_reducer_function_path: str = ""  # (total_lengths, response_lengths, masks, per_token)
    custom_rollout_log_function_path: str = ""  # (rollout_id, args, samples, metrics, time) -> bool
    custom_eval_rollout_log_function_path: str = ""  # (rollout_id, args, data, metrics) -> bool
    custom_update_weight_post_write_path: str = ""  # (args, version_dir, rollout_engines)
    custom_megatron_init_path: str = ""  # init(args), when a trainer rank has built its model
    custom_megatron_before_log_prob_hook_path: str = ""  # (args, model, store_prefix)
    custom_megatron_before_train_step_hook_path: str = ""  # (args, rollout_id, step_id, model, opt, sched)
    custom_model_provider_path: str = ""  # (pre_process, post_process, vp_stage) -> GPTModel
    custom_config_path: str = ""  # YAML whose keys are set on args (after everything else)
    args: dict[str, Any] = field(default_factory=dict)  # extra slime attributes set on args
    generate_endpoint: str = "auto"  # auto: served when a rollout-side path is set | on | off
    router_port: int = 0  # port of the /generate endpoint on 127.0.0.1 (0: a free one)

    def __post_init__(self) -> None:
        if self.generate_endpoint not in ENDPOINT_MODES:
            raise ValueError(f"{SECTION}.generate_endpoint: {self.generate_endpoint!r}, choose "
                             f"one of {', '.join(ENDPOINT_MODES)}")
        if not 0 <= self.router_port < 65536:
            raise ValueError(f"{SECTION}.router_port: {self.router_port} is not a port")
        for f in fields(self):
            value = getattr(self, f.name)
            paths = value if f.name == "rollout_sample_hook_path" else [value]
            if f.name in FLAGS:
                for p in paths:
                    if p and ("." not in p or p.startswith(".") or p.endswith(".")):
                        raise ValueError(
                            f"{SECTION}.{f.name}: {p!r} is not a dotted path module.function "
                            "(slime's load_function rule)")

    def paths(self) -> dict[str, str]:
        """The function-path keys that are set (flag -> path); sample hooks as one entry each."""
        out = {k: getattr(self, k) for k in FLAGS
               if k != "rollout_sample_hook_path" and getattr(self, k)}
        for i, p in enumerate(self.rollout_sample_hook_path):
            out[f"rollout_sample_hook_path[{i}]"] = p
        return out

    def serves_generate(self) -> bool:
        if self.generate_endpoint != "auto":
            return self.generate_endpoint == "on"
        return bool(self.custom_generate_function_path or self.rollout_function_path
                    or self.eval_function_path or self.rollout_sample_hook_path)
