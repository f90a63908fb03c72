"""The ``[rlve]`` section: which reasoning-gym task, its difficulty ladder, when to move."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RlveSection:
    # reasoning-gym dataset name (reasoning_gym.create_dataset), e.g. basic_arithmetic
    task: str = "basic_arithmetic"
    # generator options every level shares (keyword arguments of the task's config)
    base_kwargs: dict[str, Any] = field(default_factory=dict)
    # the difficulty ladder, easiest first: each table overrides base_kwargs for that level
    levels: list[dict[str, Any]] = field(default_factory=list)
    start_level: int = 0  # level of the first prompts
    window: int = 256  # rolling accuracy over the last `window` scored samples of the current level
    min_samples: int = 0  # samples at a level before it may move (0: window)
    up_threshold: float = 0.8  # rolling accuracy >= this: one level harder
    down_threshold: float = 0.2  # rolling accuracy <= this: one level easier
    success_reward: float = 1.0  # a sample counts as correct when its reward >= this
    reward_key: str = ""  # for dict rewards: the key that holds the score ("" : "score")
    # the prompt text: str.format over question, answer and the entry's metadata keys
    prompt_format: str = "{question}"
    # literal replacements applied to the formatted prompt, e.g. {" " = ""}
    prompt_replace: dict[str, str] = field(default_factory=dict)
    entries_per_level: int = 1000000  # generator size per level (entries cycle past it)
    eval_levels: list[int] = field(default_factory=list)  # levels of the eval split ([]: all)
    eval_size: int = 100  # eval prompts per eval level
    eval_seed: int = 10007  # seed of the eval generators (train uses run.seed)
