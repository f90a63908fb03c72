"""The difficulty controller: a rolling accuracy per level and the rule that moves the level.

Pure Python (no reasoning-gym, no torch) so the rule is tested on its own.

Rule, applied after each rollout step's results are observed:

* only results of samples drawn at the *current* level count (samples still in flight from a
  level that was left, e.g. returned partial groups, are ignored);
* the rolling accuracy is the mean of the last ``window`` results at the current level;
* once at least ``min_samples`` results are in the window: accuracy ``>= up`` moves one level
  harder (unless at the top), accuracy ``<= down`` one level easier (unless at the bottom);
* a move empties the window, so the next decision is about the new level only.

The history of moves (step, from, to, accuracy) is kept in the state for the record.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Move:
    step: int
    src: int
    dst: int
    accuracy: float


@dataclass
class DifficultyController:
    num_levels: int
    level: int = 0
    window: int = 256
    min_samples: int = 0
    up: float = 0.8
    down: float = 0.2
    results: deque[bool] = field(default_factory=deque)
    history: list[Move] = field(default_factory=list)
    max_level: int = 0  # hardest level reached so far

    def __post_init__(self) -> None:
        if self.num_levels < 1:
            raise ValueError("rlve.levels: at least one level is needed")
        if not 0 <= self.level < self.num_levels:
            raise ValueError(f"rlve.start_level {self.level} is outside 0..{self.num_levels - 1}")
        if self.window < 1:
            raise ValueError(f"rlve.window must be >= 1, got {self.window}")
        if not self.min_samples:
            self.min_samples = self.window
        if not 1 <= self.min_samples <= self.window:
            raise ValueError(f"rlve.min_samples must be in 1..window ({self.window}), "
                             f"got {self.min_samples}")
        if not 0.0 <= self.down < self.up <= 1.0:
            raise ValueError(f"rlve thresholds need 0 <= down_threshold < up_threshold <= 1, "
                             f"got {self.down} and {self.up}")
        self.results = deque(self.results, maxlen=self.window)
        self.max_level = max(self.max_level, self.level)

    @property
    def accuracy(self) -> float | None:
        """Rolling accuracy at the current level (``None`` before any result)."""
        return sum(self.results) / len(self.results) if self.results else None

    def observe(self, level: int, correct: bool) -> None:
        if level == self.level:
            self.results.append(bool(correct))

    def update(self, step: int) -> Move | None:
        """Apply the rule once (see the module docstring); the move made, if any."""
        acc = self.accuracy
        if acc is None or len(self.results) < self.min_samples:
            return None
        dst = self.level
        if acc >= self.up and self.level + 1 < self.num_levels:
            dst = self.level + 1
        elif acc <= self.down and self.level > 0:
            dst = self.level - 1
        if dst == self.level:
            return None
        move = Move(step=step, src=self.level, dst=dst, accuracy=acc)
        self.history.append(move)
        self.level = dst
        self.max_level = max(self.max_level, dst)
        self.results.clear()
        return move

    def state_dict(self) -> dict[str, Any]:
        return {"level": self.level, "max_level": self.max_level,
                "results": [int(r) for r in self.results],
                "history": [vars(m) for m in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        level = int(state["level"])
        if not 0 <= level < self.num_levels:
            raise ValueError(f"rlve state: level {level} is outside 0..{self.num_levels - 1} "
                             "(rlve.levels changed since the checkpoint?)")
        self.level = level
        self.max_level = int(state.get("max_level", level))
        self.results = deque((bool(r) for r in state.get("results", [])), maxlen=self.window)
        self.history = [Move(**m) for m in state.get("history", [])]
