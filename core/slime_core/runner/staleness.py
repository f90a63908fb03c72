"""Off-policy bounds: how stale a sample may be when it is trained on.

Staleness of a sample = the trainer's weight version when it trains on the sample minus the
version the sample's first token was generated with (``Sample.weight_versions[0]``). With
weights synced every ``weights.update_interval = U`` steps it is at most ``U - 1`` for
synchronous runs and ``U`` for one-step-off asynchronous ones (``run.async_rollout``); a
partial rollout continued from an earlier step can be older still. In fully-asynchronous mode
(``run.rollout_mode = "fully_async"``) generation runs ahead of the trainer by up to
``run.async_buffer_groups`` groups, so staleness has no schedule-given bound: ``run.max_staleness``
is required there (>= ``U``, and never 0 or -1) and the continuous generator
(:mod:`slime_core.rollout.streaming`) enforces it itself: a buffered group with a sample staler
than the bound is discarded and its prompt generated again, a partial response that would be
is restarted from its prompt.

``run.max_staleness = N`` (``-1``: no bound) is enforced in two places: a configuration
whose normal staleness already exceeds N fails at start-up, and at each step every sample
staler than N is *dropped*: it gets ``remove_sample`` (the conversion zeroes its loss mask,
so it keeps its place in its group's baseline but gives no gradient) and is counted in
``rollout/stale_dropped``.
"""

from __future__ import annotations

import warnings
from typing import Any

from slime_hookspecs import Sample

from slime_core.config.sections import async_buffer_groups, rollout_mode


def worst_case(config: Any) -> int:
    interval = config.weights.update_interval
    return interval if rollout_mode(config.run) != "sync" else interval - 1


def check_config(config: Any) -> None:
    run = config.run
    mode = rollout_mode(run)
    if mode == "fully_async":
        check_fully_async(config)
        return
    if mode == "one_step_off" and run.executor == "ray" and config.ray.colocate:
        raise ValueError(
            "run.async_rollout generates while the trainer trains, but ray.colocate = true "
            "puts the engines to sleep while training; turn one of them off"
        )
    if mode == "one_step_off" and not config.algorithm.is_correction and config.train.loss != "sft":
        # measured on examples/tiny_arith (3 seeds): held-out accuracy 0.75-0.89 with large
        # swings against 0.92-0.94 with "tis" and 0.93-0.97 synchronously (docs/executors.md)
        warnings.warn(
            "run.async_rollout = true trains each sample one weight update after it was "
            "generated, and algorithm.is_correction is off, so nothing corrects for the "
            "weights that sampled it; set algorithm.is_correction = \"tis\" (or the name of "
            "another mismatch-correction record)", stacklevel=2)
    if run.max_staleness < 0:
        return
    worst = worst_case(config)
    if worst > run.max_staleness:
        said = " and run.async_rollout = true" if mode == "one_step_off" else ""
        raise ValueError(
            f"run.max_staleness = {run.max_staleness}, but with weights.update_interval = "
            f"{config.weights.update_interval}{said} samples are trained up to {worst} weight "
            f"versions after they were generated, so they would be dropped every "
            f"{config.weights.update_interval} steps; raise run.max_staleness to >= {worst} or "
            "lower weights.update_interval"
        )


def check_fully_async(config: Any) -> None:
    """What ``run.rollout_mode = "fully_async"`` refuses at start-up, each naming its key."""
    run = config.run
    interval = config.weights.update_interval
    if run.max_staleness < 0:
        # no bound makes no sense here: the generator runs ahead of the trainer, and a partial
        # response continued across updates can be arbitrarily old
        raise ValueError(
            "run.max_staleness = -1 (no bound), but run.rollout_mode = \"fully_async\" needs one: "
            "generation runs ahead of the trainer and partial responses continue across weight "
            f"updates; set run.max_staleness >= {interval} (weights.update_interval), e.g. 2")
    if run.max_staleness < 1:
        raise ValueError(
            f"run.max_staleness = {run.max_staleness}, but with run.rollout_mode = "
            "\"fully_async\" every sample is generated while the trainer trains on older ones, "
            "so it is at least 1 weight version old when trained on: 0 would drop everything; "
            f"set run.max_staleness >= {interval}")
    if run.max_staleness < interval:
        raise ValueError(
            f"run.max_staleness = {run.max_staleness}, but with weights.update_interval = "
            f"{interval} and run.rollout_mode = \"fully_async\" samples are trained up to "
            f"{interval} weight versions after they were generated; raise run.max_staleness to "
            f">= {interval} or lower weights.update_interval")
    if async_buffer_groups(config) < config.rollout.batch_size:
        raise ValueError(
            f"run.async_buffer_groups = {run.async_buffer_groups} is less than rollout.batch_size "
            f"= {config.rollout.batch_size}: the trainer takes rollout.batch_size groups a step "
            "from that buffer; raise it (or 0: twice rollout.batch_size)")
    if run.executor == "ray" and config.ray.colocate:
        raise ValueError(
            "run.rollout_mode = \"fully_async\" generates while the trainer trains, but "
            "ray.colocate = true puts the engines to sleep while training; turn one of them off")
    if config.train.loss == "sft":
        raise ValueError(
            "run.rollout_mode = \"fully_async\" with train.loss = \"sft\": SFT generates "
            "nothing; use run.rollout_mode = \"sync\"")
    if config.debug.replay_rollouts:
        raise ValueError(
            "debug.replay_rollouts replays dumped steps, but run.rollout_mode = \"fully_async\" "
            "generates continuously; replay with run.rollout_mode = \"sync\"")
    if not config.algorithm.is_correction:
        warnings.warn(
            "run.rollout_mode = \"fully_async\" trains on samples generated by older weights, "
            "and algorithm.is_correction is off, so nothing corrects for the weights that "
            "sampled them; set algorithm.is_correction = \"tis\" (or the name of "
            "another mismatch-correction record)", stacklevel=3)


def drop_stale(samples: list[Sample], trainer_version: int, max_staleness: int) -> int:
    """Mark samples staler than ``max_staleness`` as removed; returns how many."""
    if max_staleness < 0:
        return 0
    n = 0
    for s in samples:
        if s.weight_versions and trainer_version - s.weight_versions[0] > max_staleness:
            if not s.remove_sample:
                s.remove_sample = True
                s.metadata["dropped_reason"] = "stale"
                n += 1
    return n
