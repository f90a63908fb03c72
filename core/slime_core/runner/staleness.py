"""Off-policy bounds: how stale a sample may be when it is trained on.

Staleness of a sample = the trainer's weight version when it trains on the sample minus the
version the sample's first token was generated with (``Sample.weight_versions[0]``). With
weights synced every ``weights.update_interval = U`` steps it is at most ``U - 1`` for a
schedule that generates each step's rollout when the step starts; a schedule that generates
while the trainer trains adds to it, and says so in its record's ``check`` (slime-std's
``one_step_off``: ``U``; ``fully_async``: no schedule-given bound, so ``run.max_staleness`` is
required and its generator enforces it itself). A partial rollout continued from an earlier
step can be older still.

``run.max_staleness = N`` (``-1``: no bound) is enforced in two places: a configuration
whose normal staleness already exceeds N fails at start-up, and at each step every sample
staler than N is *dropped*: it gets ``remove_sample`` (the conversion zeroes its loss mask,
so it keeps its place in its group's baseline but gives no gradient) and is counted in
``rollout/stale_dropped``.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Sample


def check_config(config: Any, schedule: Any) -> None:
    """Start-up checks of ``run.max_staleness``: ``schedule`` (the rollout schedule record that
    ``run.rollout_mode`` names) refuses what it cannot run first (its ``check``), then the bound
    of a schedule that never overlaps training (``weights.update_interval - 1``) applies."""
    if schedule.check is not None:
        schedule.check(config)
    run = config.run
    if run.max_staleness < 0:
        return
    interval = config.weights.update_interval
    worst = interval - 1
    if worst > run.max_staleness:
        raise ValueError(
            f"run.max_staleness = {run.max_staleness}, but with weights.update_interval = "
            f"{interval} samples are trained up to {worst} weight versions after they were "
            f"generated, so they would be dropped every {interval} steps; raise "
            f"run.max_staleness to >= {worst} or lower weights.update_interval"
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
