"""Tool-use metrics of a rollout, from the counts multi-turn generation leaves in metadata.

* ``<prefix>/tool_calls``: calls answered in the step (errors included);
* ``<prefix>/tool_calls_per_sample``: their mean over the samples;
* ``<prefix>/tool_errors/<kind>``: calls per error kind (see :mod:`slime_agent.executor`);
* ``<prefix>/tool_success_rate``: share of calls that ran without error (only with calls);
* ``<prefix>/turns_mean``: model turns per sample.

Nothing is reported when no sample went through the multi-turn generator.
"""

from __future__ import annotations

from typing import Any


def tool_metrics(samples: list[Any], prefix: str) -> dict[str, float]:
    tooled = [s for s in samples if isinstance(s.metadata, dict) and "tool_calls" in s.metadata]
    if not tooled:
        return {}
    calls = sum(int(s.metadata["tool_calls"]) for s in tooled)
    errors: dict[str, int] = {}
    for s in tooled:
        for kind, n in (s.metadata.get("tool_errors") or {}).items():
            errors[kind] = errors.get(kind, 0) + int(n)
    m = {
        f"{prefix}/tool_calls": float(calls),
        f"{prefix}/tool_calls_per_sample": calls / len(tooled),
        f"{prefix}/turns_mean": sum(int(s.metadata.get("turns", 0)) for s in tooled) / len(tooled),
    }
    for kind, n in sorted(errors.items()):
        m[f"{prefix}/tool_errors/{kind}"] = float(n)
    if calls:
        m[f"{prefix}/tool_success_rate"] = (calls - sum(errors.values())) / calls
    return m
