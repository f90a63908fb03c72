"""Plugin module for the ray executor tests, loaded in every Ray worker via
``run.plugin_modules = ["tests.ray_plugins"]`` (objects registered on the driver cannot travel).

* reward ``digit_fraction``: the fraction of response characters that are digits, so the
  tiny untrained model gets rewards that differ within a group (non-zero GRPO advantages);
* engine ``slow_local``: the local engine, but each ``generate`` first writes a marker file
  ``gen-v<weight version>-<pid>-<n>`` into ``[ray_test] marker_dir`` (each ``reseed``
  ``seed-<pid>-<seed>``) and waits ``delay_s``,
  so a test can kill the engine's process while a request is in flight;
* ``slime_before_train_step``: with ``[ray_test] crash_rollout = k``, trainer rank 1 exits
  its process at the training of rollout k, once (``crash_marker`` remembers it);
* ``[ray_test] node_dir``: every trainer rank (``slime_trainer_init``), ``slow_local`` engine
  and rollout manager (building ``digit_fraction``) writes ``node-<role>-<Ray node id>-<pid>``
  there, so a multi-node test sees where each process really ran; each trainer step writes
  ``train-<rollout id>-<pid>`` and then waits ``train_delay_s``;
* ``[ray_test] agent_waits_for_update``: ``tests.held_agent`` episodes of every group but the
  first wait after their first answer until the rollout manager has released its rollouts
  after a weight update (``slime_release_rollouts``, which sets ``RELEASED``), so an episode
  spans an update whatever the machine's speed.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_hookspecs import ConfigSection, RewardFunctionRecord, RolloutEngineRecord, hookimpl


@dataclass
class RayTestSection:
    marker_dir: str = ""  # slow_local engine: where generate() announces itself
    delay_s: float = 0.0  # slow_local engine: pause before each generate
    crash_rollout: int = -1  # trainer rank 1 exits at the training of this rollout (-1: never)
    crash_marker: str = ""  # created when the crash happens, so a resumed run does not crash
    node_dir: str = ""  # where each process writes node-<role>-<node id>-<pid>
    train_delay_s: float = 0.0  # pause at each trainer step (after its train-<id>-<pid> marker)
    agent_waits_for_update: bool = False  # held_agent episodes (group >= 1) span an update


AGENT_WAITS = False  # this process's [ray_test] agent_waits_for_update, once engines are ready
RELEASED = threading.Event()  # set by slime_release_rollouts(end=False) in this process


def _announce(config: Any, role: str) -> None:
    if config.ray_test.node_dir:
        import ray

        node = ray.get_runtime_context().get_node_id()
        Path(config.ray_test.node_dir, f"node-{role}-{node}-{os.getpid()}").touch()


@hookimpl
def slime_add_config(schema: Any) -> list[ConfigSection]:
    return [ConfigSection(name="ray_test", schema=RayTestSection,
                          summary="fault injection for the ray executor tests")]


def _digit_fraction(config: Any) -> Any:
    _announce(config, "manager")

    def reward(sample: Any) -> float:
        text = sample.response or ""
        return sum(c.isdigit() for c in text) / len(text) if text else 0.0

    return reward


def _slow_engine(config: Any, engine_index: int = 0, accelerator: Any = None) -> Any:
    from slime_std.engine.local_engine import LocalEngine

    class SlowLocalEngine(LocalEngine):
        calls = 0

        def generate(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
            cfg = self.config.ray_test
            if cfg.marker_dir:
                SlowLocalEngine.calls += 1
                name = f"gen-v{self.weight_version()}-{os.getpid()}-{SlowLocalEngine.calls}"
                Path(cfg.marker_dir, name).touch()
            time.sleep(cfg.delay_s)
            return super().generate(prompts, params)

        def reseed(self, seed: int) -> None:
            if self.config.ray_test.marker_dir:
                Path(self.config.ray_test.marker_dir, f"seed-{os.getpid()}-{seed}").touch()
            super().reseed(seed)

    _announce(config, "engine")
    return SlowLocalEngine(config, engine_index, accelerator)


@hookimpl
def slime_rollout_engines_ready(config: Any, clients: list[Any]) -> None:
    global AGENT_WAITS
    AGENT_WAITS = config.ray_test.agent_waits_for_update


@hookimpl
def slime_release_rollouts(config: Any, end: bool) -> None:
    if not end:
        RELEASED.set()


@hookimpl
def slime_trainer_init(config: Any, model: Any) -> None:
    _announce(config, "trainer")


@hookimpl
def slime_register_reward_functions() -> list[RewardFunctionRecord]:
    return [RewardFunctionRecord(name="digit_fraction", factory=_digit_fraction,
                                 summary="fraction of response characters that are digits")]


@hookimpl
def slime_register_rollout_engines() -> list[RolloutEngineRecord]:
    return [RolloutEngineRecord(name="slow_local", factory=_slow_engine,
                                summary="local engine announcing and delaying each generate")]


@hookimpl
def slime_before_train_step(config: Any, rollout_id: int, step_id: int, model: Any,
                            optimizer: Any, scheduler: Any) -> None:
    cfg = config.ray_test
    if cfg.node_dir:
        Path(cfg.node_dir, f"train-{rollout_id}-{os.getpid()}").touch()
        time.sleep(cfg.train_delay_s)
    if cfg.crash_rollout != rollout_id or not cfg.crash_marker:
        return
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() == 1 and not os.path.exists(cfg.crash_marker):
        Path(cfg.crash_marker).touch()
        os._exit(17)  # the process dies as a crashed or OOM-killed rank would
