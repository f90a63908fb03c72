"""Entry point of ``slime-rlve``: the ``[rlve]`` section, the ``rlve`` data source, its feedback
and its metrics.

* ``slime_rollout_all_samples`` (rollout manager): the step's scored samples go to the source's
  controller, which may move the difficulty for the next step;
* ``slime_log_rollout`` (driver): ``rlve/level`` (the level after this step's update),
  ``rlve/sampled_level`` (mean level the step's prompts were drawn at), ``rlve/max_level``,
  ``rlve/rolling_accuracy``, ``rlve/accuracy_level_<L>`` (this step's accuracy per level);
* ``slime_log_eval``: ``eval/rlve/accuracy_level_<L>`` for each eval level.

Nothing heavy is imported here: reasoning-gym loads when a source is built.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from typing import Any

from slime_hookspecs import Config, ConfigSection, DataSourceRecord, Sample, hookimpl

from rlve.config import RlveSection


def probe() -> str | None:
    if importlib.util.find_spec("reasoning_gym") is None:
        return "reasoning_gym is not installed (pip install reasoning-gym)"
    return None


def _make_source(config: Config, split: str) -> Any:
    from rlve.source import make_source

    return make_source(config, split)


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(
        name="rlve", schema=RlveSection,
        summary="adaptive reasoning-gym difficulty: task, level ladder, rolling-accuracy "
                "window and thresholds, prompt format, eval levels",
    )


@hookimpl
def slime_register_data_sources() -> list[DataSourceRecord]:
    return [DataSourceRecord(
        name="rlve", factory=_make_source, probe=probe,
        library="reasoning-gym",
        summary="reasoning-gym task whose generator config moves up/down a level ladder with "
                "the rolling accuracy ([rlve])",
    )]


@hookimpl
def slime_rollout_all_samples(config: Config, groups: list[list[Sample]], data_source: Any) -> None:
    observe = getattr(data_source, "observe", None)
    if observe is not None and type(data_source).__module__ == "rlve.source":
        observe(groups)


def _per_level(config: Config, samples: list[Sample], prefix: str) -> dict[str, float]:
    from rlve.source import section

    cfg = section(config)
    hits: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        info = s.metadata.get("rlve") or {}
        if "level" not in info or s.reward is None:
            continue
        r = s.reward
        if isinstance(r, dict):
            r = r.get(cfg.reward_key or "score", 0.0)
        hits[int(info["level"])].append(float(float(r) >= cfg.success_reward))
    return {f"{prefix}/accuracy_level_{lv}": sum(v) / len(v) for lv, v in sorted(hits.items())}


@hookimpl
def slime_log_rollout(config: Config, rollout_id: int, samples: list[Sample],
                      metrics: dict[str, float]) -> None:
    infos = [s.metadata["rlve"] for s in samples if isinstance(s.metadata.get("rlve"), dict)]
    if not infos:
        return
    metrics["rlve/sampled_level"] = sum(int(i["level"]) for i in infos) / len(infos)
    last = infos[-1]
    if "level_after" in last:
        metrics["rlve/level"] = float(last["level_after"])
        metrics["rlve/max_level"] = float(last["max_level"])
        if last.get("rolling_accuracy") is not None:
            metrics["rlve/rolling_accuracy"] = float(last["rolling_accuracy"])
    metrics.update(_per_level(config, samples, "rlve"))


@hookimpl
def slime_log_eval(config: Config, rollout_id: int, samples: list[Sample],
                   metrics: dict[str, float]) -> None:
    if any(isinstance(s.metadata.get("rlve"), dict) for s in samples):
        metrics.update(_per_level(config, samples, "eval/rlve"))
