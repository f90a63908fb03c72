"""One-step-off asynchronous rollouts (``run.async_rollout``).

The rollout of step k+1 is submitted as soon as the rollout of step k is collected, so it is
generated while step k trains. Weights never change in the middle of a generation: the
driver drains the in-flight rollout before every weight sync and evaluation. Hooks keep
their meaning: ``slime_before_rollout(k+1)`` fires when that rollout is submitted (before
``slime_before_train(k)``), ``slime_after_rollout(k+1)`` when its result is collected.

A checkpoint written while a rollout is in flight records the data source as it was before
that rollout was submitted, so a resumed run regenerates those prompts (with the newer
weights the trainer had when it stopped: resume is exact for synchronous runs only).
"""

from __future__ import annotations

import time
from typing import Any

from slime_hookspecs import RolloutResult


class OneStepOff:
    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.pending: tuple[int, Any, dict[str, Any]] | None = None  # step, future, source state

    def _start(self, step: int) -> None:
        d = self.driver
        d.check_versions()
        d._reseed(step)
        state = d.train_source.state_dict()
        d.pm.slime_before_rollout(config=d.config, rollout_id=step)
        self.pending = (step, d.executor.submit_rollout(step), state)

    def take(self, step: int) -> tuple[RolloutResult, float]:
        """The rollout of ``step`` (submitted earlier or now) and the seconds waited for it;
        then submits the rollout of ``step + 1``."""
        d = self.driver
        if self.pending is None:
            self._start(step)
        elif self.pending[0] != step:
            raise RuntimeError(f"async rollout: step {step} wanted, step {self.pending[0]} in flight")
        assert self.pending is not None
        _, future, _ = self.pending
        t = time.perf_counter()
        result = future.result()
        waited = time.perf_counter() - t
        self.pending = None
        d.pm.slime_after_rollout(config=d.config, rollout_id=step, result=result)
        if step + 1 < d.config.run.num_rollouts:
            self._start(step + 1)
        return result, waited

    def drain(self) -> None:
        """Wait until no generation is running (the result stays with its future)."""
        if self.pending is not None:
            self.pending[1].result()

    def source_state(self) -> dict[str, Any] | None:
        """The train data source before the in-flight rollout, if one is in flight."""
        return self.pending[2] if self.pending is not None else None
