"""slime's custom rollout / eval log functions (``True`` return: skip the default logging)."""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Sample, Status

from slime_compat.functions import load_flag
from slime_compat.runtime import runtime
from slime_compat.samples import wrap


def log_rollout(config: Any, rollout_id: int, samples: list[Sample],
                metrics: dict[str, float]) -> bool | None:
    rt = runtime(config)
    fn = load_flag("custom_rollout_log_function_path", rt.section.custom_rollout_log_function_path)
    handled = fn(rollout_id, rt.args, [wrap(s) for s in samples], metrics,
                 metrics.get("perf/rollout_time", 0.0))
    return True if handled else None


def eval_data(config: Any, samples: list[Sample]) -> dict[str, dict[str, Any]]:
    """slime's eval ``data``: one dataset named ``eval`` (the project has one eval set)."""
    key = config.rollout.reward_key
    return {"eval": {
        "rewards": [s.reward[key] if isinstance(s.reward, dict) and key else s.reward for s in samples],
        "truncated": [s.status == Status.TRUNCATED for s in samples],
        "samples": [wrap(s) for s in samples],
    }}


def log_eval(config: Any, rollout_id: int, samples: list[Sample],
             metrics: dict[str, float]) -> bool | None:
    rt = runtime(config)
    fn = load_flag("custom_eval_rollout_log_function_path",
                   rt.section.custom_eval_rollout_log_function_path)
    return True if fn(rollout_id, rt.args, eval_data(config, samples), metrics) else None
