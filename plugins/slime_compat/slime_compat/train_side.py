"""Training-side flags: conversion, advantages, loss, IS correction, reducer, trainer hooks.

slime's loss-side functions work on *flat* tensors (the micro-batch's response tokens
concatenated, ``torch.cat``); the project's hooks pass per-sample lists. The adapters here
concatenate and split along ``response_lengths``.
"""

from __future__ import annotations

from typing import Any, Callable

from slime_hookspecs import Sample, TrainBatch

from slime_compat.functions import load_flag
from slime_compat.runtime import runtime
from slime_compat.samples import wrap
from slime_compat.train_data import RolloutData, batch_from_dict


def _floats(values: Any) -> list[float]:
    values = values.tolist() if hasattr(values, "tolist") else values
    return [float(v) for v in values]


def reward_post_process(config: Any, samples: list[Sample]) -> tuple[list[float], list[float]]:
    rt = runtime(config)
    fn = load_flag("custom_reward_post_process_path", rt.section.custom_reward_post_process_path)
    raw, shaped = fn(rt.args, [wrap(s) for s in samples])
    return _floats(raw), _floats(shaped)


def convert(config: Any, samples: list[Sample]) -> TrainBatch:
    rt = runtime(config)
    path = rt.section.custom_convert_samples_to_train_data_path
    fn = load_flag("custom_convert_samples_to_train_data_path", path)
    data = fn(rt.args, [wrap(s) for s in samples])
    if not isinstance(data, dict):
        raise TypeError(f"[slime].custom_convert_samples_to_train_data_path {path!r} returned "
                        f"{type(data).__name__}, slime's contract is a dict")
    return batch_from_dict(data, samples, config)


def advantages(config: Any, batch: TrainBatch, estimator: str) -> list[Any]:
    """``custom_advantage_function_path`` (else ``estimator``, the one the config chose), then
    ``rollout_data_postprocess_path``, which slime calls right after the advantages."""
    rt = runtime(config)
    sec = rt.section
    data = RolloutData(batch)
    if sec.custom_advantage_function_path:
        fn = load_flag("custom_advantage_function_path", sec.custom_advantage_function_path)
        fn(rt.args, data)
        if batch.advantages is None:
            raise ValueError(f"[slime].custom_advantage_function_path "
                             f"{sec.custom_advantage_function_path!r} did not set "
                             "rollout_data['advantages']")
    else:
        from slime_core.api import get_registries

        rec = get_registries().advantage_estimator.get(estimator)
        # a record's factory builds the estimator, which the batch is then given
        batch.advantages, batch.returns = (list(x) if x is not None else None
                                           for x in rec.factory(config)(batch))
    if sec.rollout_data_postprocess_path:
        fn = load_flag("rollout_data_postprocess_path", sec.rollout_data_postprocess_path)
        fn(rt.args, rt.step, data)
    return list(batch.advantages or [])


class PolicyLogits:
    """What slime's custom loss gets as ``logits``: the micro-batch's per-sample response
    log-probs (with gradient), read back by the shim's ``get_log_probs_and_entropy``. The
    project's trainers hand hooks log-probs, not vocabulary logits."""

    def __init__(self, log_probs: list[Any], entropy: list[Any] | None = None) -> None:
        self.log_probs, self.entropy = log_probs, entropy

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"slime_compat passes custom losses log-probs, not logits: logits.{name} is not "
            "available; use get_log_probs_and_entropy(logits, ...) from "
            "slime.backends.megatron_utils.loss")


def flat_reducer(reducer: Callable[[list[Any]], Any], lengths: list[int]) -> Callable[[Any], Any]:
    """slime's ``sum_of_sample_mean`` (a flat tensor in) over the project's reducer (a list)."""

    def sum_of_sample_mean(x: Any) -> Any:
        return reducer(list(x.split(lengths)))

    return sum_of_sample_mean


def loss(config: Any, batch: TrainBatch, log_probs: list[Any],
         reducer: Callable[[list[Any]], Any]) -> tuple[Any, dict[str, float]]:
    rt = runtime(config)
    path = rt.section.custom_loss_function_path
    fn = load_flag("custom_loss_function_path", path)
    value, log = fn(rt.args, RolloutData(batch), PolicyLogits(log_probs),
                    flat_reducer(reducer, batch.response_lengths))
    return value, {k if "/" in k else f"train/{k}": _scalar(v) for k, v in (log or {}).items()}


def _scalar(v: Any) -> float:
    if hasattr(v, "numel"):
        return float(v.detach().float().mean()) if v.numel() else 0.0
    return float(v)


def is_correction(config: Any, pg_loss: list[Any], train_log_probs: list[Any],
                  rollout_log_probs: list[Any], loss_masks: list[Any]) -> tuple[list[Any], list[Any], dict[str, float]]:
    import torch

    rt = runtime(config)
    fn = load_flag("custom_tis_function_path", rt.section.custom_tis_function_path)
    lengths = [len(p) for p in pg_loss]
    flat, masks, metrics = fn(args=rt.args, pg_loss=torch.cat(pg_loss), train_log_probs=train_log_probs,
                              rollout_log_probs=rollout_log_probs, loss_masks=loss_masks,
                              total_lengths=lengths, response_lengths=lengths)
    return list(flat.split(lengths)), list(masks), {k: _scalar(v) for k, v in (metrics or {}).items()}


def pg_loss_reducer(config: Any, response_lengths: list[int], loss_masks: list[Any]) -> Callable[[list[Any]], Any]:
    import torch

    rt = runtime(config)
    fn = load_flag("custom_pg_loss_reducer_function_path",
                   rt.section.custom_pg_loss_reducer_function_path)
    flat = fn(list(response_lengths), list(response_lengths), loss_masks,
              rt.args.calculate_per_token_loss)
    return lambda values: flat(torch.cat(values))


def trainer_init(config: Any, model: Any) -> None:
    rt = runtime(config)
    load_flag("custom_megatron_init_path", rt.section.custom_megatron_init_path)(rt.args)


STORE_PREFIX = {"actor": "", "old": "", "ref": "ref_", "critic": "critic_"}


def before_log_prob(config: Any, model: Any, role: str) -> None:
    rt = runtime(config)
    fn = load_flag("custom_megatron_before_log_prob_hook_path",
                   rt.section.custom_megatron_before_log_prob_hook_path)
    fn(rt.args, model, STORE_PREFIX.get(role, f"{role}_"))


def before_train_step(config: Any, rollout_id: int, step_id: int, model: Any, optimizer: Any,
                      scheduler: Any) -> None:
    rt = runtime(config)
    fn = load_flag("custom_megatron_before_train_step_hook_path",
                   rt.section.custom_megatron_before_train_step_hook_path)
    fn(rt.args, rollout_id, step_id, model, optimizer, scheduler)


def after_weights_written(config: Any, version_dir: str, engines: list[Any]) -> None:
    rt = runtime(config)
    fn = load_flag("custom_update_weight_post_write_path",
                   rt.section.custom_update_weight_post_write_path)
    fn(rt.args, version_dir, engines)
