"""Per-dataset sampling settings and generate functions, looked up by a sample's dataset."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample, SamplingParams

from slime_core.config.eval_datasets import EvalDatasetSpec, resolved
from slime_core.evaluation.suite import DATASET_KEY


def import_function(path: str, key: str) -> Callable[..., Any]:
    """``"package.module:function"`` imported; errors name ``key``."""
    module, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{key}: cannot import {path!r}: {type(exc).__name__}: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"{key}: {path!r} is not callable")
    return fn


class EvalSettings:
    """What differs between eval datasets once their samples are in one rollout."""

    def __init__(self, config: Any) -> None:
        self.specs: dict[str, EvalDatasetSpec] = {s.name: s for s in resolved(config)}
        # imported now: a wrong path fails before anything is generated
        self._generate = {name: import_function(s.generate, f"eval.datasets.{name}.generate")
                          for name, s in self.specs.items() if s.generate}

    def params(self, group: list[Sample], default: SamplingParams) -> SamplingParams:
        """The sampling settings of the group's dataset (``default`` for the plain eval)."""
        name: Any = group[0].metadata.get(DATASET_KEY) if group else None
        spec = self.specs.get(name)
        if spec is None:
            return default
        return default.replace(
            temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k,
            max_new_tokens=spec.max_new_tokens, stop=list(spec.stop or []),
        )

    def generate_fn(self, sample: Sample) -> Callable[..., Any] | None:
        """The dataset's own generate function, or ``None`` (the ``slime_generate`` hook)."""
        if not self._generate:
            return None
        name: Any = sample.metadata.get(DATASET_KEY)
        return self._generate.get(name)
