"""The ``rlve`` data source: reasoning-gym prompts at the controller's current level.

Train split: each fresh group is the next entry of the current level's generator
(``reasoning_gym.create_dataset(task, seed=run.seed + level, **base_kwargs, **levels[level])``,
entries taken in index order, so a resumed run continues with the very next entry).
:meth:`AdaptiveSource.observe` (wired to ``slime_rollout_all_samples``) feeds the step's
scored samples to the :class:`~rlve.curriculum.DifficultyController`, which may move the
level for the next step. Groups given back with ``add_samples`` are handed out first, as they
were (their samples keep the level they were drawn at).

Eval split: ``rlve.eval_size`` prompts of each of ``rlve.eval_levels`` (seeded by
``rlve.eval_seed``, so they are never training prompts), all of them on every
``get_samples(-1)``; the eval metrics are then split per level.

Samples carry ``metadata["rlve"] = {"level": L}`` plus the entry for the core's
``reasoning_gym`` reward (``metadata["task"]``, ``metadata["reasoning_gym"]``).
"""

from __future__ import annotations

import copy
import json
from typing import Any, cast

from slime_hookspecs import Sample, Status

from rlve.config import RlveSection
from rlve.curriculum import DifficultyController

STATE_FORMAT = "slime.rlve/1"


def section(config: Any) -> RlveSection:
    sec = getattr(config, "rlve", None)
    if sec is None:
        raise ValueError("data.source = 'rlve' needs the [rlve] section (plugin rlve not loaded?)")
    return sec


class AdaptiveSource:
    """A :class:`slime_hookspecs.DataSource` whose difficulty follows the rolling accuracy."""

    def __init__(self, config: Any, split: str, *, tokenizer: Any = None) -> None:
        if split not in ("train", "eval"):
            raise ValueError(f"data source split must be 'train' or 'eval', got {split!r}")
        self.config = config
        self.split = split
        self.cfg = cfg = section(config)
        if not cfg.levels:
            raise ValueError("rlve.levels is empty: give one table of generator options per "
                             "difficulty level, easiest first")
        self.num_levels = len(cfg.levels)
        self.n = int(config.eval.n_samples_per_prompt if split == "eval"
                     else config.rollout.n_samples_per_prompt)
        self.controller = DifficultyController(
            num_levels=self.num_levels, level=int(cfg.start_level), window=int(cfg.window),
            min_samples=int(cfg.min_samples), up=float(cfg.up_threshold),
            down=float(cfg.down_threshold),
        )
        self._tokenizer = tokenizer
        self._datasets: dict[int, Any] = {}
        self.positions = [0] * self.num_levels  # next entry index per level
        self.next_group_index = 0
        self.next_sample_index = 0
        self.buffer: list[list[Sample]] = []
        self.steps_observed = 0
        levels = list(cfg.eval_levels) or list(range(self.num_levels))
        for lv in levels:
            if not 0 <= int(lv) < self.num_levels:
                raise ValueError(f"rlve.eval_levels: {lv} is outside 0..{self.num_levels - 1}")
        self.eval_levels = [int(lv) for lv in levels]
        self._check_kwargs()

    # -- generators ---------------------------------------------------------------------------
    def level_kwargs(self, level: int) -> dict[str, Any]:
        return {**dict(self.cfg.base_kwargs), **dict(self.cfg.levels[level])}

    def _check_kwargs(self) -> None:
        for lv in range(self.num_levels):
            self.dataset(lv)  # a wrong task name or option fails now, not mid-run

    def dataset(self, level: int) -> Any:
        ds = self._datasets.get(level)
        if ds is None:
            import reasoning_gym
            from reasoning_gym.factory import DATASETS

            if self.cfg.task not in DATASETS:
                raise ValueError(f"rlve.task: {self.cfg.task!r} is not a reasoning-gym dataset; "
                                 f"choose one of: {', '.join(sorted(DATASETS))}")
            seed = (int(self.cfg.eval_seed) if self.split == "eval"
                    else int(self.config.run.seed)) + level
            size = int(self.cfg.eval_size if self.split == "eval" else self.cfg.entries_per_level)
            try:
                ds = reasoning_gym.create_dataset(self.cfg.task, size=size, seed=seed,
                                                  **self.level_kwargs(level))
            except (TypeError, ValueError, AssertionError) as exc:
                raise ValueError(f"rlve.levels[{level}] ({self.level_kwargs(level)}): "
                                 f"{type(exc).__name__}: {exc}") from None
            self._datasets[level] = ds
        return ds

    @property
    def level(self) -> int:
        return self.controller.level

    # -- prompts ------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from slime_core.api import load_tokenizer

            self._tokenizer = load_tokenizer(self.config.model)
        return self._tokenizer

    def set_tokenizer(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def prompt_text(self, entry: dict[str, Any]) -> str:
        fields = {**(entry.get("metadata") or {}), "question": entry["question"],
                  "answer": entry["answer"]}
        try:
            text = self.cfg.prompt_format.format_map(fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"rlve.prompt_format {self.cfg.prompt_format!r}: {exc!r}; fields: "
                             f"{', '.join(sorted(fields))}") from None
        for old, new in self.cfg.prompt_replace.items():
            text = text.replace(old, new)
        return text

    def encode(self, text: str) -> tuple[Any, list[int]]:
        data = self.config.data
        text = (data.prompt_template or "{prompt}").format(prompt=text)
        tok = self.tokenizer
        if data.apply_chat_template:
            messages = [{"role": "user", "content": text}]
            if data.system_prompt:
                messages.insert(0, {"role": "system", "content": data.system_prompt})
            rendered = tok.apply_chat_template(messages, **dict(data.chat_template_kwargs),
                                               tokenize=False, add_generation_prompt=True)
            return messages, list(tok.encode(rendered, add_special_tokens=False))
        return text, list(tok.encode(text, add_special_tokens=False))

    def make_group(self, level: int, index: int) -> list[Sample]:
        ds = self.dataset(level)
        entry = ds[index % len(ds)]
        md = _jsonable(entry.get("metadata") or {})
        prompt, ids = self.encode(self.prompt_text(entry))
        meta = {"task": md.get("source_dataset") or self.cfg.task,
                "reasoning_gym": {"question": str(entry["question"]), "answer": entry["answer"],
                                  "metadata": md},
                "rlve": {"level": level}}
        gi = self.next_group_index
        self.next_group_index += 1
        group = []
        for _ in range(self.n):
            group.append(Sample(
                group_index=gi, index=self.next_sample_index, prompt=copy.deepcopy(prompt),
                tokens=list(ids), response="", response_length=0, label=entry["answer"],
                loss_mask=[], rollout_log_probs=[], status=Status.PENDING,
                metadata=copy.deepcopy(meta),
            ))
            self.next_sample_index += 1
        return group

    # -- DataSource protocol ------------------------------------------------------------------
    def __len__(self) -> int:
        if self.split == "eval":
            return len(self.eval_levels) * int(self.cfg.eval_size)
        return int(self.cfg.entries_per_level)

    def get_samples(self, num_groups: int | None, rollout_id: int | None = None) -> list[list[Sample]]:
        if self.split == "eval":  # every eval prompt, every time (the driver rewinds the state)
            self.next_group_index = self.next_sample_index = 0
            return [self.make_group(lv, i) for lv in self.eval_levels
                    for i in range(int(self.cfg.eval_size))]
        if num_groups is None or num_groups < 0:
            raise ValueError("the rlve train source is procedural: ask for a number of groups")
        out = self.buffer[:num_groups]
        del self.buffer[:num_groups]
        while len(out) < num_groups:
            lv = self.level
            out.append(self.make_group(lv, self.positions[lv]))
            self.positions[lv] += 1
        return out

    def add_samples(self, groups: list[list[Sample]]) -> None:
        self.buffer.extend(list(g) for g in groups if g)

    def observe(self, groups: list[list[Sample]], step: int | None = None) -> None:
        """Feed one step's scored samples to the controller, then apply its rule once.

        Stamps ``metadata["rlve"]`` of every sample with the level after the update and the
        rolling accuracy, for the metrics (they are computed where the samples are logged).
        """
        step = self.steps_observed if step is None else step
        self.steps_observed += 1
        samples = [s for g in groups for s in g]
        for s in samples:
            info = s.metadata.get("rlve") or {}
            if "level" in info and s.reward is not None and s.status != Status.ABORTED:
                self.controller.observe(int(info["level"]), self.correct(s))
        acc = self.controller.accuracy
        self.controller.update(step)
        for s in samples:
            info = s.metadata.setdefault("rlve", {})
            info.update(level_after=self.level, max_level=self.controller.max_level,
                        rolling_accuracy=acc)

    def correct(self, sample: Sample) -> bool:
        r = sample.reward
        if isinstance(r, dict):
            key = self.cfg.reward_key or "score"
            if key not in r:
                raise ValueError(f"rlve: the reward is a dict without {key!r} (rlve.reward_key); "
                                 f"keys: {sorted(r)}")
            r = r[key]
        return float(cast(float, r)) >= float(self.cfg.success_reward)

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready: the controller (level, window, history), the next entry of every
        level, the counters and the returned groups."""
        return {"format": STATE_FORMAT, "split": self.split, "task": self.cfg.task,
                "levels": _jsonable([self.level_kwargs(lv) for lv in range(self.num_levels)]),
                "controller": self.controller.state_dict(), "positions": list(self.positions),
                "next_group_index": self.next_group_index,
                "next_sample_index": self.next_sample_index,
                "steps_observed": self.steps_observed,
                "buffer": [[s.to_dict() for s in g] for g in self.buffer]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"data source state has format {state.get('format')!r}, expected "
                             f"{STATE_FORMAT!r} (data.source changed?)")
        levels = _jsonable([self.level_kwargs(lv) for lv in range(self.num_levels)])
        if state.get("task") != self.cfg.task or _jsonable(state.get("levels")) != levels:
            raise ValueError("rlve state was saved with another task or level ladder "
                             f"({state.get('task')!r}, {state.get('levels')}); the positions "
                             "would mean other prompts")
        self.controller.load_state_dict(state["controller"])
        self.positions = [int(p) for p in state["positions"]]
        self.next_group_index = int(state["next_group_index"])
        self.next_sample_index = int(state["next_sample_index"])
        self.steps_observed = int(state.get("steps_observed", 0))
        self.buffer = [[Sample.from_dict(d) for d in g] for g in state.get("buffer", [])]


def _jsonable(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists), so saved state compares equal."""
    return json.loads(json.dumps(value, default=list))


def make_source(config: Any, split: str) -> AdaptiveSource:
    """``DataSourceRecord`` factory."""
    return AdaptiveSource(config, split)
