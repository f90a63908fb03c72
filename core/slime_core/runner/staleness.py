"""Off-policy bounds: how stale a sample may be when it is trained on.

Staleness of a sample = the trainer's weight version when it trains on the sample minus the
version the sample's first token was generated with (``Sample.weight_versions[0]``). With
weights synced every ``weights.update_interval = U`` steps it is at most ``U - 1`` for
synchronous runs and ``U`` for one-step-off asynchronous ones (``run.async_rollout``); a
partial rollout continued from an earlier step can be older still.

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


def worst_case(config: Any) -> int:
    interval = config.weights.update_interval
    return interval if config.run.async_rollout else interval - 1


def check_config(config: Any) -> None:
    run = config.run
    if run.async_rollout and run.executor == "ray" and config.ray.colocate:
        raise ValueError(
            "run.async_rollout generates while the trainer trains, but ray.colocate = true "
            "puts the engines to sleep while training; turn one of them off"
        )
    if run.async_rollout and not config.algorithm.is_correction and config.train.loss != "sft":
        # measured on examples/tiny_arith (3 seeds): held-out accuracy 0.75-0.89 with large
        # swings against 0.92-0.94 with "tis" and 0.93-0.97 synchronously (docs/executors.md)
        warnings.warn(
            "run.async_rollout = true trains each sample one weight update after it was "
            "generated, and algorithm.is_correction is off, so nothing corrects for the "
            "weights that sampled it; set algorithm.is_correction = \"tis\" (or implement "
            "slime_is_correction in a plugin, and ignore this warning)", stacklevel=2)
    if run.max_staleness < 0:
        return
    worst = worst_case(config)
    if worst > run.max_staleness:
        mode = " and run.async_rollout = true" if run.async_rollout else ""
        raise ValueError(
            f"run.max_staleness = {run.max_staleness}, but with weights.update_interval = "
            f"{config.weights.update_interval}{mode} samples are trained up to {worst} weight "
            f"versions after they were generated, so they would be dropped every "
            f"{config.weights.update_interval} steps; raise run.max_staleness to >= {worst} or "
            "lower weights.update_interval"
        )


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
