"""Prompts from reasoning-gym's procedural generators (offline, deterministic).

``data.task`` names a reasoning-gym dataset (``basic_arithmetic``, ``chain_sum``, ...) or a
comma list of them for a mixture. The train split builds
``reasoning_gym.create_dataset(task, size=data.size, seed=run.seed, **data.task_kwargs)``;
the eval split uses ``data.eval_size`` and ``data.eval_seed`` (so held-out tasks differ from
training tasks). With several tasks, row ``i`` is entry ``i // k`` of task ``i % k`` (``k``
tasks, each generated with ``ceil(size / k)`` entries), and ``data.task_kwargs`` may be a
table per task (``{chain_sum = {...}}``); a flat table applies to every task.

Row to sample: prompt = ``entry["question"]`` (through ``data.prompt_template`` and the chat
template as usual), label = ``entry["answer"]``, metadata::

    {"task": <source dataset name>,
     "reasoning_gym": {"question": ..., "answer": ..., "metadata": <entry metadata, JSON-safe>}}

``metadata["reasoning_gym"]`` is the entry the task's own scorer expects, so the
``reasoning_gym`` reward can call ``score_answer(answer, entry)`` without regenerating it.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from slime_core.api import PromptDataSource, PromptRow, json_safe

from slime_std.extras import require


def task_names(spec: str) -> list[str]:
    return [t.strip() for t in str(spec).split(",") if t.strip()]


def known_tasks() -> list[str]:
    require("reasoning_gym")
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def _kwargs_for(task: str, tasks: list[str], task_kwargs: dict[str, Any]) -> dict[str, Any]:
    if len(tasks) > 1 and any(t in task_kwargs for t in tasks):
        own = task_kwargs.get(task, {})
        if not isinstance(own, dict):
            raise ValueError(f"data.task_kwargs.{task} must be a table of dataset options")
        return dict(own)
    return dict(task_kwargs)


def entry_to_row(entry: dict[str, Any], task: str) -> PromptRow:
    md = json_safe(entry.get("metadata") or {})
    name = md.get("source_dataset") or task
    return PromptRow(
        prompt=str(entry["question"]),
        label=json_safe(entry["answer"]),
        metadata={
            "task": name,
            "reasoning_gym": {
                "question": str(entry["question"]),
                "answer": json_safe(entry["answer"]),
                "metadata": md,
            },
        },
    )


class ReasoningGymDataSource(PromptDataSource):
    """Procedural prompts from reasoning-gym; see the module docstring."""

    kind = "reasoning_gym"

    def __init__(self, config: Any, split: str, *, tokenizer: Any = None) -> None:
        super().__init__(config, split, tokenizer=tokenizer)
        data = config.data
        self.tasks = task_names(data.task)
        if not self.tasks:
            raise ValueError(
                "data.task is empty: name a reasoning-gym dataset (e.g. basic_arithmetic) or a "
                "comma list of them"
            )
        self.size = int(data.eval_size if split == "eval" else data.size)
        key = "data.eval_size" if split == "eval" else "data.size"
        if self.size < 1:
            raise ValueError(f"{key} must be >= 1, got {self.size}")
        self.task_seed = int(data.eval_seed if split == "eval" else config.run.seed)
        import reasoning_gym

        valid = known_tasks()
        per_task = math.ceil(self.size / len(self.tasks))
        self.datasets = []
        for task in self.tasks:
            if task not in valid:
                near = difflib.get_close_matches(task, valid, n=3)
                hint = f" (did you mean {', '.join(near)}?)" if near else ""
                raise ValueError(
                    f"data.task: {task!r} is not a reasoning-gym dataset{hint}; choose one of: "
                    f"{', '.join(valid)}"
                )
            kwargs = _kwargs_for(task, self.tasks, dict(data.task_kwargs))
            try:
                ds = reasoning_gym.create_dataset(task, size=per_task, seed=self.task_seed, **kwargs)
            except TypeError as exc:
                raise ValueError(f"data.task_kwargs for {task!r}: {exc}") from exc
            self.datasets.append(ds)
        self.apply_max_prompt_len()  # data.max_prompt_len: fails now if it drops every prompt

    def _num_rows(self) -> int:
        return self.size

    def _row(self, i: int) -> PromptRow:
        k = len(self.tasks)
        return entry_to_row(self.datasets[i % k][i // k], self.tasks[i % k])
