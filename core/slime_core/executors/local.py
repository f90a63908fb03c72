"""The ``local`` executor: every component in the driver's process (laptops, most tests).

One trainer rank in this process (or, with ``train.num_ranks > 1``, one spawned process per
rank: :mod:`.local_ranks`), ``rollout.num_engines`` engines, the rollout manager and the data sources
are plain objects; weights move through the configured transport in-process. Asynchronous
one-step-off rollouts run in one background thread (the engines' own lock keeps a weight
update out of a running generation; the driver never syncs while a rollout is in flight).
"""

from __future__ import annotations

import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from slime_hookspecs import AcceleratorRecord

from slime_core.executors.base import (
    build_rollout_side,
    check_weight_agreement,
    engine_weights,
    local_only_plugins,
    weights_digest,
)
from slime_core.observe import setup_parts
from slime_core.pluginmgr import SlimePluginManager
from slime_core.rollout.components import attach_buffer_filter, has_eval, make_data_source
from slime_core.rewards.routing import RewardFunctions
from slime_core.rollout.manager import RolloutManager, start_rewards
from slime_core.weights.tensors import distinct


class LocalExecutor:
    def __init__(self, manager: SlimePluginManager, config: Any, run_dir: Path,
                 accel_record: AcceleratorRecord) -> None:
        self.config = config
        reg = manager.registries
        self.accelerator = accel_record.factory()
        # the rewards first, so that their worker processes import their checkers beside the
        # rest of the set-up; then the data: a bad file or a prompt longer than the context
        # fails in a second, not after the models have loaded
        with setup_parts.part("rewards"):
            rewards = start_rewards(manager, config, has_eval(config, manager))
        try:
            self._setup(manager, config, accel_record, rewards)
        except BaseException:
            rewards.close()
            raise
        self._pool: ThreadPoolExecutor | None = None
        self._registries = reg
        self._sides: dict[str, Any] = {}  # rollout schedule name -> its rollout side

    def _setup(self, manager: SlimePluginManager, config: Any, accel_record: AcceleratorRecord,
               rewards: RewardFunctions) -> None:
        reg = manager.registries
        with setup_parts.part("data"):
            self.train_source = make_data_source(manager, config, "train")
            self.eval_source = (make_data_source(manager, config, "eval")
                                if has_eval(config, manager) else None)
            attach_buffer_filter(manager, config, self.train_source)
        self.trainer: Any
        if config.train.num_ranks > 1:
            from slime_core.executors.local_ranks import LocalRankGroup

            selection = manager.snapshot()
            only_here = local_only_plugins(manager, selection)
            if only_here:
                print(f"slime: plugin objects registered in the driver only "
                      f"({', '.join(only_here)}): their hooks do not fire in the trainer rank "
                      "processes; give importable modules in run.plugin_modules",
                      file=sys.stderr)
            reg.trainer_backend.get(config.train.backend)  # unknown names fail here, not in a rank
            with setup_parts.part("trainer"):
                self.trainer = LocalRankGroup(selection, config, accel_record, self.accelerator)
        else:
            with setup_parts.part("trainer"):
                self.trainer = reg.trainer_backend.get(config.train.backend).factory(
                    config, 0, 1, self.accelerator
                )
        engine_rec = reg.rollout_engine.get(config.rollout.engine)
        with setup_parts.part("engines"):
            self.engines = [engine_rec.factory(config, i, self.accelerator)
                            for i in range(config.rollout.num_engines)]
            self.transport = reg.weight_transport.get(config.weights.transport).factory(
                config, self.accelerator)
        self.rollouts = RolloutManager(config, self.engines, self.train_source, self.eval_source,
                                       rewards)

    def send_weights(self, version: int) -> dict[str, float]:
        weights = self.trainer.export_weights()
        stats = self.transport.send(distinct(weights), version, self.engines)
        if self.config.weights.verify:
            check_weight_agreement(
                weights_digest(weights),
                [None if (w := engine_weights(e)) is None else weights_digest(w)
                 for e in self.engines],
                version,
            )
            stats = {**stats, "verified": 1.0}
        return stats

    def submit_rollout(self, rollout_id: int) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slime-rollout")
        return self._pool.submit(self.rollouts.rollout, rollout_id)

    def rollout_side(self, name: str) -> Any:
        """The ``rollout_side`` of rollout schedule ``name``, beside the rollout manager in
        this process (built on the first call)."""
        if name not in self._sides:
            self._sides[name] = build_rollout_side(self._registries, self.config, self.rollouts,
                                                   name)
        return self._sides[name]

    def shutdown(self) -> None:
        self.rollouts.close()
        if hasattr(self.trainer, "shutdown"):
            self.trainer.shutdown()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
