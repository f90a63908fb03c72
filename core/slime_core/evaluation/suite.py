"""The eval data source of a run with ``[[eval.datasets]]``: every dataset's groups at once.

:class:`EvalSuite` is a ``DataSource`` over one source per dataset (each built by its data
source record from a copy of the config whose ``[data]`` describes that dataset, as the eval
split) plus, when ``data.eval_path`` is set too, the run's plain eval source (its samples keep
the metric names ``eval/accuracy``, ...). Samples of a dataset carry
``metadata["eval_dataset"] = name`` (what the metrics and the sampling settings key on) and,
when the dataset names a reward, ``metadata["rm_type"]``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from slime_hookspecs import Sample

from slime_core.config.eval_datasets import EvalDatasetSpec, resolved

DATASET_KEY = "eval_dataset"


def dataset_config(config: Any, spec: EvalDatasetSpec) -> Any:
    """``config`` whose ``[data]`` and eval sample count describe dataset ``spec``."""
    from slime_core.config.model import Config

    d = config.data
    data = dataclasses.replace(
        d, source=spec.source, path="", eval_path=spec.path,
        task=spec.task or d.task, task_kwargs=dict(spec.task_kwargs or d.task_kwargs),
        eval_size=spec.size if spec.size is not None else d.eval_size,
        eval_seed=spec.seed if spec.seed is not None else d.eval_seed,
        input_key=spec.input_key or d.input_key, label_key=spec.label_key or d.label_key,
        metadata_key=spec.metadata_key or d.metadata_key,
        apply_chat_template=(spec.apply_chat_template if spec.apply_chat_template is not None
                             else d.apply_chat_template),
        prompt_template=spec.prompt_template or d.prompt_template,
    )
    ev = dataclasses.replace(config.eval, n_samples_per_prompt=int(spec.n_samples or 1),
                             datasets=[])
    sections = {name: config.section(name) for name in config.sections()}
    return Config({**sections, "data": data, "eval": ev}, config.source,
                  vars(config).get("_replaced"))


class EvalSuite:
    """``DataSource`` of the eval split over several datasets (see the module docstring)."""

    def __init__(self, sources: dict[str, Any], specs: list[EvalDatasetSpec],
                 plain: Any | None = None) -> None:
        self.sources, self.plain = sources, plain
        self.specs = {s.name: s for s in specs}

    def get_samples(self, num_groups: int | None, rollout_id: int | None = None) -> list[list[Sample]]:
        """All of every dataset (each up to its ``max_prompts``); ``num_groups`` limits only
        the plain eval source."""
        out: list[list[Sample]] = []
        if self.plain is not None:
            out += self.plain.get_samples(num_groups)
        for name, source in self.sources.items():
            spec = self.specs[name]
            # each prompt once: a source hands out the next epoch after its last row
            limit = min(spec.max_prompts, len(source)) if spec.max_prompts else -1
            for group in source.get_samples(limit):
                for s in group:
                    s.metadata[DATASET_KEY] = name
                    if spec.reward:
                        s.metadata["rm_type"] = spec.reward
                out.append(group)
        return out

    def add_samples(self, groups: list[list[Sample]]) -> None:
        for g in groups:
            name: Any = g[0].metadata.get(DATASET_KEY) if g else None
            source = self.sources[name] if name in self.sources else self.plain
            assert source is not None  # handed out by a dataset's source or the plain one
            source.add_samples([g])

    def state_dict(self) -> dict[str, Any]:
        state = {name: s.state_dict() for name, s in self.sources.items()}
        return {"format": "slime.eval_suite/1", "datasets": state,
                "plain": self.plain.state_dict() if self.plain is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, s in self.sources.items():
            s.load_state_dict(state["datasets"][name])
        if self.plain is not None and state.get("plain") is not None:
            self.plain.load_state_dict(state["plain"])

    def __len__(self) -> int:
        return sum(len(s) for s in self.sources.values()) + (len(self.plain) if self.plain else 0)


def build_suite(manager: Any, config: Any, plain: Any | None) -> EvalSuite:
    """One source per ``eval.datasets`` entry (rows checked against its reward's needs)."""
    from slime_core.data.rowcheck import labels_required_by
    from slime_core.pluginmgr.deprecation import warn_deprecated_impls

    specs = resolved(config)
    sources = {}
    for spec in specs:
        sub = dataset_config(config, spec)
        rec = manager.registries.reward_function.get(spec.reward)
        with labels_required_by(spec.reward if rec.extra.get("needs_label") else None):
            warn_deprecated_impls(manager.hook.slime_make_data_source)
            custom = manager.hook.slime_make_data_source(config=sub, split="eval")
            sources[spec.name] = custom if custom is not None else \
                manager.registries.data_source.get(spec.source).factory(sub, "eval")
    return EvalSuite(sources, specs, plain)
