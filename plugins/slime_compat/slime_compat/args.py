"""The ``args`` namespace slime code receives, with slime's attribute names.

Built once per resolved config and process from the project's sections (``ARG_MAP`` below says
where each attribute comes from), then the ``[slime]`` flags themselves (unset paths are
``None`` as in slime), then ``[slime].args`` (any extra attribute, e.g. ``rm_type``), then
the keys of ``custom_config_path``'s YAML, which slime applies last too
(``slime/utils/arguments.py``: "will override"). Attributes slime has but this project has no
equivalent for are set to slime's defaults, so ``args.x`` reads do not fail.
"""

from __future__ import annotations

import argparse
from typing import Any

from slime_compat.config import FLAGS, SECTION, SLIME_ESTIMATORS

# slime attribute -> "section.key" of this project's config
ARG_MAP: dict[str, str] = {
    "hf_checkpoint": "model.path",
    "n_samples_per_prompt": "rollout.n_samples_per_prompt",
    "rollout_batch_size": "rollout.batch_size",
    "rollout_temperature": "rollout.temperature",
    "rollout_top_p": "rollout.top_p",
    "rollout_top_k": "rollout.top_k",
    "rollout_max_response_len": "rollout.max_new_tokens",
    "rollout_stop_token_ids": "rollout.stop_token_ids",
    "rollout_num_engines": "rollout.num_engines",
    "partial_rollout": "rollout.partial_rollout",
    "mask_offpolicy_in_partial_rollout": "rollout.mask_offpolicy_in_partial_rollout",
    "num_rollout": "run.num_rollouts",
    "seed": "run.seed",
    "rollout_seed": "run.seed",
    "save_interval": "run.save_interval",
    "prompt_data": "data.path",
    "input_key": "data.input_key",
    "label_key": "data.label_key",
    "metadata_key": "data.metadata_key",
    "tool_key": "data.tools_key",
    "apply_chat_template": "data.apply_chat_template",
    "rollout_shuffle": "data.shuffle",
    "eval_interval": "eval.interval",
    "n_samples_per_eval_prompt": "eval.n_samples_per_prompt",
    "eval_temperature": "eval.temperature",
    "eval_top_p": "eval.top_p",
    "advantage_estimator": "algorithm.advantage_estimator",
    "eps_clip": "algorithm.eps_clip",
    "use_kl_loss": "algorithm.use_kl_loss",
    "kl_loss_coef": "algorithm.kl_loss_coef",
    "kl_loss_type": "algorithm.kl_estimator",
    "kl_coef": "algorithm.kl_in_reward_coef",
    "entropy_coef": "algorithm.entropy_coef",
    "gamma": "algorithm.gamma",
    "lambd": "algorithm.lam",
    "normalize_advantages": "algorithm.whiten_advantages",
    "grpo_std_normalization": "algorithm.normalize_std",
    "lr": "train.lr",
    "min_lr": "train.min_lr",
    "weight_decay": "train.weight_decay",
    "clip_grad": "train.grad_clip",
    "adam_eps": "train.adam_eps",
}

# slime's defaults for attributes with no project equivalent that slime code commonly reads
SLIME_DEFAULTS: dict[str, Any] = {
    "rm_type": None, "rm_url": None, "eval_reward_key": None,
    "rollout_skip_special_tokens": False, "rollout_global_dataset": True,
    "sglang_server_concurrency": 512, "sglang_dp_size": None, "use_distributed_post": False,
    "use_rollout_routing_replay": False, "use_routing_replay": False, "ci_test": False,
    "rewards_normalization": True, "calculate_per_token_loss": False,
    "use_rollout_logprobs": False, "use_tis": False, "get_mismatch_metrics": False,
    "tis_clip": 2.0, "tis_clip_low": 0.0, "multimodal_keys": None, "rollout_max_prompt_len": None,
    "rollout_max_context_len": None, "eval_max_response_len": None, "debug_train_only": False,
    "debug_rollout_only": False, "load_debug_rollout_data": None, "log_passrate": False,
    "colocate": False, "offload": False, "use_critic": False, "eval_datasets": [],
    "sglang_router_ip": None, "sglang_router_port": None, "router_policy": None,
    "apply_chat_template_kwargs": {}, "num_gpus_per_node": 0, "value_clip": 0.2,
}


def build_args(config: Any, router: tuple[str, int] | None = None) -> argparse.Namespace:
    """slime's ``args`` for ``config``; ``router`` is the /generate endpoint's (host, port)."""
    ns = argparse.Namespace(**SLIME_DEFAULTS)
    for attr, dotted in ARG_MAP.items():
        section, _, key = dotted.partition(".")
        if section in config and hasattr(config.section(section), key):
            setattr(ns, attr, getattr(config.section(section), key))
    r = config.rollout
    ns.over_sampling_batch_size = r.over_sampling_batch_size or r.batch_size
    ns.rollout_stop = list(r.stop) or None
    ns.reward_key = r.reward_key or None
    ns.global_batch_size = r.batch_size * r.n_samples_per_prompt
    ns.num_steps_per_rollout = config.train.num_steps_per_rollout
    ns.eval_max_response_len = config.eval.max_new_tokens or r.max_new_tokens
    ns.eval_prompt_data = [config.data.eval_path] if config.data.eval_path else None
    # slime: a JSON dict (default {}) and a token count (default None: no filter)
    ns.apply_chat_template_kwargs = dict(config.data.chat_template_kwargs)
    ns.rollout_max_prompt_len = config.data.max_prompt_len or None
    ns.rollout_max_context_len = config.rollout.max_context_len or None
    alg = config.algorithm
    # slime code compares with slime's names ("ppo"), not the record's ("gae")
    ns.advantage_estimator = SLIME_ESTIMATORS.get(alg.advantage_estimator, alg.advantage_estimator)
    ns.eps_clip_high = alg.eps_clip_high or alg.eps_clip
    ns.eps_clip_c = alg.eps_clip_c or None
    ns.rollout_num_gpus = r.num_engines
    ns.rollout_num_gpus_per_engine = 1
    if "ppo" in config:
        ns.value_clip = config.ppo.value_clip
        ns.use_critic = ns.advantage_estimator == "ppo"
    sec = config.section(SECTION)
    for key in FLAGS:
        setattr(ns, key, getattr(sec, key) or None)
    ns.rollout_sample_hook_path = list(sec.rollout_sample_hook_path)
    ns.group_rm = sec.group_rm
    ns.custom_config_path = sec.custom_config_path or None
    # slime picks the loss by loss_type; a custom loss path only runs with "custom_loss"
    ns.loss_type = "custom_loss" if sec.custom_loss_function_path else (
        "sft_loss" if config.train.loss == "sft" else "policy_loss")
    if router is not None:
        ns.sglang_router_ip, ns.sglang_router_port = router
    for key, value in sec.args.items():
        setattr(ns, key, value)
    if sec.custom_config_path:
        for key, value in read_custom_config(sec.custom_config_path).items():
            setattr(ns, key, value)
    return ns


def read_custom_config(path: str) -> dict[str, Any]:
    """slime's ``--custom-config-path``: a YAML mapping whose keys become ``args`` attributes."""
    import yaml

    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"[slime].custom_config_path {path!r}: the YAML must be a mapping, "
                         f"got {type(data).__name__}")
    return data
