"""Eval metrics: per dataset ``eval/<name>/...`` and the plain ``eval/...`` as before.

For each dataset the rollout metrics of its samples under the prefix ``eval/<name>``
(``accuracy``, ``reward_mean``, ``response_length_mean``/``_max``, ``truncated_ratio``,
``failed``, ...; see :mod:`slime_core.observe.rollout_metrics`: accuracy is the fraction of samples
whose reward is at least 1 - 1e-6, which is the mean reward for 0/1 rewards) and, for each k
of ``eval.pass_at`` with k <= its samples per prompt, ``eval/<name>/pass@k``: the unbiased
estimator of Chen et al. (2021), ``1 - C(n - c, k) / C(n, k)`` for a prompt with n samples of
which c are correct, averaged over prompts. A failed sample counts as incorrect.
"""

from __future__ import annotations

from collections import defaultdict
from math import comb
from typing import Any

from slime_hookspecs import Sample, Status

from slime_core.evaluation.suite import DATASET_KEY
from slime_core.observe.rollout_metrics import rollout_metrics
from slime_core.rewards.scalar import scalar_reward

CORRECT = 1 - 1e-6


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n, c of them
    correct, is correct."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _correct(config: Any, s: Sample) -> bool:
    return s.status != Status.FAILED and scalar_reward(config, s) >= CORRECT


def pass_at_metrics(config: Any, samples: list[Sample], prefix: str) -> dict[str, float]:
    groups: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group_index].append(s)
    out: dict[str, float] = {}
    for k in config.eval.pass_at:
        usable = [g for g in groups.values() if len(g) >= k]
        if usable:
            out[f"{prefix}/pass@{k}"] = sum(
                pass_at_k(len(g), sum(_correct(config, s) for s in g), k) for g in usable
            ) / len(usable)
    return out


def eval_metrics(config: Any, samples: list[Sample]) -> dict[str, float]:
    """Every eval metric of one evaluation (see the module docstring)."""
    by_name: dict[str | None, list[Sample]] = defaultdict(list)
    for s in samples:
        by_name[s.metadata.get(DATASET_KEY)].append(s)
    out: dict[str, float] = {}
    for name, subset in by_name.items():
        prefix = "eval" if name is None else f"eval/{name}"
        out.update(rollout_metrics(config, subset, prefix))
        out.update(pass_at_metrics(config, subset, prefix))
    return out
