"""Which reward function scores a sample: per-row routing through ``metadata["rm_type"]``.

As slime's ``rm_type`` field: a row whose metadata names a reward function record
(``{"prompt": ..., "label": ..., "metadata": {"rm_type": "gpqa"}}``) is scored by that record
whatever ``rollout.reward`` (or ``eval.reward``, or an eval dataset's ``reward``) says, so one
data file mixes tasks. Rows without it use the configured reward. A record that scores whole
groups (``group=True``) is called with the one sample. An unknown name fails that sample,
naming the row's value and the valid names; the others are scored.
"""

from __future__ import annotations

import sys
from typing import Any

from slime_hookspecs import Sample

from slime_core.rewards.processes import (
    PROCESSES_KEY,
    InProcesses,
    RewardProcesses,
    unguarded_main,
)

ROW_KEY = "rm_type"


def row_reward_name(sample: Sample) -> str | None:
    """The reward named by the sample's row (``metadata["rm_type"]``), if any."""
    md = sample.metadata if isinstance(sample.metadata, dict) else {}
    name = md.get(ROW_KEY)
    return (str(name).strip() or None) if name is not None else None


class RewardFunctions:
    """Reward function records by name, built once each from the config. With
    ``rollout.reward_processes`` > 0, the per-sample functions of records that allow it
    (``extra["processes"]``) are called through a pool of worker processes
    (:mod:`slime_core.rewards.processes`): calling one returns a future."""

    def __init__(self, manager: Any, config: Any) -> None:
        self.manager, self.config = manager, config
        self._built: dict[str, tuple[Any, bool, str]] = {}
        workers = config.rollout.reward_processes
        workers = 0 if workers == "auto" else int(workers)  # no plugin resolved it: off
        script = unguarded_main() if workers > 0 else None
        if script is not None:
            print(f"rollout.reward_processes = {workers}: not started, rewards stay on the "
                  f"rollout's thread; {script} has no `if __name__ == \"__main__\":` guard, so "
                  "every spawned worker would run its top level (and the training in it) "
                  "again; put the run under the guard", file=sys.stderr)
            workers = 0
        self.processes = RewardProcesses(workers) if workers > 0 else None

    def get(self, name: str, why: str = "") -> tuple[Any, bool, str]:
        """``(fn, is_group, source)``; ``source`` names it and its plugin for messages."""
        if name not in self._built:
            rec = self.manager.registries.reward_function.get(name)
            source = f"reward function {name!r} (plugin {rec.owner!r}{why})"
            fn = rec.factory(self.config)
            if self.processes is not None and not rec.group and rec.extra.get(PROCESSES_KEY):
                fn = InProcesses(fn, self.processes, source)
            self._built[name] = (fn, rec.group, source)
        return self._built[name]

    def warm(self) -> None:
        """Start the worker processes, if any, with the functions built so far that run in
        them (:meth:`RewardProcesses.warm`)."""
        if self.processes is not None:  # (no function to warm: no pool started)
            self.processes.warm([fn.fn for fn, _, _ in self._built.values()
                                 if isinstance(fn, InProcesses)])

    def close(self) -> None:
        """Stop the worker processes, if any were started (a later call through the pool
        would start new ones)."""
        if self.processes is not None:
            self.processes.close()

    def for_row(self, sample: Sample) -> tuple[Any, bool, str] | None:
        """The row's own reward (``None`` when the row names none)."""
        name = row_reward_name(sample)
        return None if name is None else self.get(name, ", from the row's metadata.rm_type")
