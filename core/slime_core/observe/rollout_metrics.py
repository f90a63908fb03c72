"""Rollout metrics: reward distribution, accuracy, lengths, truncation, failures, staleness.

``accuracy`` is the fraction of samples whose scalar reward is at least 1 - 1e-6 (a fully
correct answer under the 0/1 verifiers); partial-credit rewards count as wrong.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample, Status

from slime_core.rewards.scalar import scalar_reward


def rollout_metrics(config: Any, samples: list[Sample], prefix: str,
                    trainer_version: int | None = None) -> dict[str, float]:
    if not samples:
        return {}
    ok = [s for s in samples if s.status != Status.FAILED]
    rewards = [scalar_reward(config, s) for s in ok]
    lengths = [s.response_length for s in samples]
    m: dict[str, float] = {
        f"{prefix}/samples": float(len(samples)),
        f"{prefix}/failed": float(len(samples) - len(ok)),
        f"{prefix}/response_length_mean": statistics.fmean(lengths),
        f"{prefix}/response_length_max": float(max(lengths)),
        f"{prefix}/truncated_ratio": sum(s.status == Status.TRUNCATED for s in samples) / len(samples),
    }
    if rewards:
        m[f"{prefix}/reward_mean"] = _overflowing(statistics.fmean, rewards)
        m[f"{prefix}/reward_std"] = _overflowing(statistics.pstdev, rewards) \
            if len(rewards) > 1 else 0.0
        m[f"{prefix}/reward_min"] = min(rewards)
        m[f"{prefix}/reward_max"] = max(rewards)
        srt = sorted(rewards)
        for q in (25, 50, 75):
            m[f"{prefix}/reward_p{q}"] = srt[min(len(srt) - 1, int(q / 100 * len(srt)))]
        m[f"{prefix}/accuracy"] = sum(r >= 1 - 1e-6 for r in rewards) / len(rewards)
    failed_reasons: dict[str, int] = {}
    for s in samples:
        if s.status == Status.FAILED and s.error:
            key = s.error.split(":")[0]
            failed_reasons[key] = failed_reasons.get(key, 0) + 1
    for k, v in failed_reasons.items():
        m[f"{prefix}/failed/{k}"] = float(v)
    if trainer_version is not None:
        stale = [trainer_version - s.weight_versions[0] for s in samples if s.weight_versions]
        if stale:
            m[f"{prefix}/staleness_mean"] = statistics.fmean(stale)
            m[f"{prefix}/staleness_max"] = float(max(stale))
    return m


def _overflowing(stat: Callable[[list[float]], float], values: list[float]) -> float:
    """``stat(values)``, or ``inf`` where it overflows: two rewards of 1e308 (finite, and
    accepted with ``rollout.max_abs_reward = 0``) overflow ``fmean``'s exact sum, and the
    step must reach the trainer's health check rather than fail in its metrics."""
    try:
        return float(stat(values))
    except OverflowError:
        return math.inf
