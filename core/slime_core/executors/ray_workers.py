"""What runs inside the ray executor's actors, and the engine facade the other actors use.

Every actor starts with :func:`bootstrap`: it rebuilds the driver's plugin set from the
picklable :class:`~slime_core.pluginmgr.PluginSelection` (entry points by name plus
``run.plugin_modules`` by import path), makes it this process's manager
(``slime_core.context.set_manager``) and applies the driver's seeds and thread count. So a
hook fires in the process its docstring names, with the same plugins as on the driver.
Plugin *objects* registered on the driver (``register_object``) cannot travel; the executor
warns about them.

The classes are plain Python (``ray.remote`` wraps them in :mod:`.ray_executor`):

* :class:`EngineWorker`: one rollout engine built from its registry record; also the engine
  side of every weight transport (one generic entry, ``weight_transport_call``: the record's
  ``engine_side``, see :mod:`slime_core.weights.engine_side`) and the weight digest;
* :class:`TrainerWorker`: one data-parallel trainer rank (joins the default process group)
  and, on rank 0, the sender of every weight transport;
* :class:`RolloutManagerWorker`: the data sources, the :class:`RolloutManager` (rewards,
  filters, ``slime_rollout``/``slime_generate`` hooks) and, with ``run.fault_tolerance``, the
  :class:`EngineSupervisor`.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from typing import Any

from slime_hookspecs import GenerateOutput, RolloutResult, SamplingParams

from slime_core.context import set_manager
from slime_core.executors.base import build_rollout_side, engine_weights, weights_digest
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.rollout.engine_client import EngineLostError
from slime_core.runtime import process_settings
from slime_core.weights.tensors import distinct


def bootstrap(selection: PluginSelection, config: Any) -> SlimePluginManager:
    """The driver's plugin set, seeds and torch thread count, in this worker process."""
    import torch

    manager = SlimePluginManager(selection).load()
    set_manager(manager)
    process_settings.apply(config)
    random.seed(config.run.seed)
    torch.manual_seed(config.run.seed)
    return manager


def make_accelerator(manager: SlimePluginManager, name: str) -> tuple[Any, Any]:
    """The record and accelerator object; custom resources get their visible-devices variable
    from the ids Ray assigned (Ray sets ``CUDA_VISIBLE_DEVICES`` itself)."""
    rec = manager.registries.accelerator.get(name)
    env = rec.visible_devices_env
    if env and rec.ray_resource not in ("CPU", "GPU") and not os.environ.get(env):
        import ray  # only inside a Ray worker: the local executor's ranks have no Ray

        ids = ray.get_runtime_context().get_accelerator_ids().get(rec.ray_resource)
        if ids:
            os.environ[env] = ",".join(str(i) for i in ids)
    return rec, rec.factory()


# -- engines ---------------------------------------------------------------------------------


class EngineWorker:
    def __init__(self, selection: PluginSelection, config: Any, index: int,
                 accelerator: str) -> None:
        self.manager = bootstrap(selection, config)
        self.config, self.index = config, index
        _, accel = make_accelerator(self.manager, accelerator)
        rec = self.manager.registries.rollout_engine.get(config.rollout.engine)
        self.engine = rec.factory(config, index, accel)
        self._transport_sides: dict[str, Any] = {}  # weight transport name -> its engine side

    def ping(self) -> int:
        return os.getpid()

    def node_ip(self) -> str:
        import ray

        return str(ray.util.get_node_ip_address())

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[GenerateOutput]:
        return self.engine.generate(prompts, params)

    def update_weights(self, weights: Any, version: int) -> None:
        self.engine.update_weights(weights, version)

    # -- weights ------------------------------------------------------------------------------
    def weight_transport_call(self, transport: str, method: str, *args: Any) -> Any:
        """The one entry of every weight transport's engine side: ``method(*args)`` of the
        object the record ``transport`` builds here (``engine_side(config, engine)``, once
        per actor process), looked up in this actor's registry."""
        from slime_core.weights.engine_side import build_engine_side

        side = self._transport_sides.get(transport)
        if side is None:
            side = build_engine_side(self.manager.registries, self.config, self.engine,
                                     transport)
            self._transport_sides[transport] = side
        return getattr(side, method)(*args)

    def update_weights_from_refs(self, refs: list[Any], version: int) -> None:
        """Fault-tolerant re-sync of a restarted engine (:class:`EngineSupervisor`): fetch the
        newest version's buckets from the object store, load them in one update."""
        import ray

        merged: dict[str, Any] = {}
        for part in ray.get(list(refs)):
            merged.update(part)
        self.engine.update_weights(merged, version)

    def weight_version(self) -> int:
        return int(self.engine.weight_version())

    def health(self) -> bool:
        return bool(self.engine.health())

    def abort(self) -> None:
        self.engine.abort()

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def reseed(self, seed: int) -> None:
        if hasattr(self.engine, "reseed"):
            self.engine.reseed(seed)

    def weights_digest(self) -> str | None:
        w = engine_weights(self.engine)
        return None if w is None else weights_digest(w)

    def shutdown(self) -> None:
        self.engine.shutdown()


class RemoteEngine:
    """A :class:`~slime_hookspecs.RolloutEngine` over an :class:`EngineWorker` actor.

    Synchronous calls (``ray.get``), so the rollout manager's ``EngineClient`` and the
    transports use it like a local engine. With a ``supervisor`` (``run.fault_tolerance``) a
    ``generate`` whose actor died waits for the supervisor to restart and re-sync it, then
    sends the same requests again: nothing they produced was delivered, so no sample is
    counted twice and none is lost.
    """

    def __init__(self, handle: Any, index: int, supervisor: EngineSupervisor | None = None) -> None:
        self.handle, self.index, self.supervisor = handle, index, supervisor
        self._abort_epoch = 0

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        return ray.get(getattr(self.handle, method).remote(*args))

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[GenerateOutput]:
        from ray.exceptions import RayActorError

        while True:
            epoch = self._abort_epoch
            seen = self.supervisor.generation[self.index] if self.supervisor else 0
            try:
                return self._call("generate", prompts, params)
            except RayActorError as exc:
                if self.supervisor is None:
                    raise EngineLostError(
                        f"rollout engine {self.index} died ({type(exc).__name__}: its process "
                        "or its node is gone); set run.fault_tolerance = true to restart dead "
                        "engines, or continue with core run --resume RUN_DIR"
                    ) from exc
                self.supervisor.recover(self.index, seen, exc)
                if self._abort_epoch != epoch:  # the batch filled up meanwhile
                    v = self.supervisor.version
                    return [GenerateOutput([], [], "abort", v) for _ in prompts]
                # re-queue: the same requests on the restarted engine

    def update_weights(self, weights: Any, version: int) -> None:
        self._call("update_weights", weights, version)

    def weight_transport_call(self, transport: str, method: str, *args: Any) -> Any:
        """A weight transport's engine side, run in the actor (what
        ``slime_core.api.call_engine_side`` calls for an actor)."""
        return self._call("weight_transport_call", transport, method, *args)

    def weight_version(self) -> int:
        if self.supervisor is not None:
            return self.supervisor.weight_version(self.index)
        return int(self._call("weight_version"))

    def health(self) -> bool:
        return bool(self._call("health"))

    def abort(self) -> None:
        from ray.exceptions import RayActorError

        self._abort_epoch += 1
        try:
            self._call("abort")
        except RayActorError:
            pass  # a dead engine has nothing in flight; its re-queued calls see the epoch

    def sleep(self) -> None:
        self._call("sleep")

    def wake_up(self) -> None:
        self._call("wake_up")

    def reseed(self, seed: int) -> None:
        self._call("reseed", seed)

    def pid(self) -> int:
        return int(self._call("ping"))

    def weights_digest(self) -> str | None:
        return self._call("weights_digest")

    def shutdown(self) -> None:
        from ray.exceptions import RayActorError

        try:
            self._call("shutdown")
        except RayActorError:
            pass


def restart_seed(run_seed: int, index: int, generation: int) -> int:
    """The seed of engine ``index`` after its ``generation``-th restart, a seed of its own (the
    driver reseeds every engine at each rollout of a sync or one-step-off run; a fully-async
    generator only once, at its start)."""
    return run_seed * 1_000_003 + 500_009 * generation + 31 * index + 17


class EngineSupervisor:
    """Fault tolerance of the engines (in the rollout manager's process).

    Ray restarts a dead engine actor (``max_restarts``) in its placement-group bundle, keeping
    its handle; the supervisor waits until the new instance answers, loads the newest synced
    weights into it from the object store (``set_source``: the refs rank 0 put at the last
    sync) and only then lets requests through again. A health thread probes every engine
    each ``ray.health_check_interval_s``: a dead one is recovered at once, one that does not
    answer within ``ray.health_check_timeout_s`` is killed (and so restarted). Past
    ``ray.max_engine_restarts`` restarts of one engine, each ``generate`` sent to it raises
    (naming the engine and the last cause): its samples fail (``rollout/failed/generate``)
    while the other engines carry on, and the run stops when every sample of a step failed.
    """

    def __init__(self, config: Any, handles: list[Any]) -> None:
        self.config, self.handles = config, handles
        self.generation = [0] * len(handles)
        self.per_engine = [0] * len(handles)
        self.restarts = 0
        self.version = 0
        self._refs: list[Any] = []
        self._locks = [threading.Lock() for _ in handles]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_source(self, refs: list[Any], version: int) -> None:
        self._refs, self.version = list(refs), int(version)

    def weight_version(self, index: int) -> int:
        import ray
        from ray.exceptions import RayActorError

        while True:
            seen = self.generation[index]
            try:
                with self._locks[index]:  # not while a recovery of this engine is under way
                    return int(ray.get(self.handles[index].weight_version.remote()))
            except RayActorError as exc:
                # lost between rollouts (its node died while the trainer trained) and not yet
                # seen by the health thread: recover here, as a generate would
                self.recover(index, seen, exc)

    def recover(self, index: int, seen_generation: int, cause: BaseException) -> None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        with self._locks[index]:
            if self.generation[index] != seen_generation:
                return  # recovered by another caller meanwhile
            self.per_engine[index] += 1
            self.restarts += 1
            limit = self.config.ray.max_engine_restarts
            if self.per_engine[index] > limit:
                raise RuntimeError(
                    f"rollout engine {index} failed {self.per_engine[index]} times "
                    f"(ray.max_engine_restarts = {limit}); last cause: {cause}"
                ) from cause
            handle = self.handles[index]
            deadline = time.monotonic() + self.config.ray.startup_timeout_s
            while True:
                try:
                    if ray.get(handle.health.remote(), timeout=30):
                        break
                except (RayActorError, GetTimeoutError) as exc:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"rollout engine {index} did not come back within "
                            f"{self.config.ray.startup_timeout_s}s after {cause}"
                        ) from exc
                time.sleep(0.2)
            if self._refs:
                ray.get(handle.update_weights_from_refs.remote(self._refs, self.version))
            got = int(ray.get(handle.weight_version.remote()))
            if self._refs and got != self.version:
                raise RuntimeError(f"restarted engine {index} reports version {got}, "
                                   f"expected {self.version}")
            self.generation[index] += 1
            # a new process starts from the seed of the first one: without this it would draw
            # the samples it drew at start-up again (fully-async runs reseed only once)
            ray.get(handle.reseed.remote(restart_seed(self.config.run.seed, index,
                                                      self.generation[index])))
            print(f"slime: rollout engine {index} restarted after {type(cause).__name__}; "
                  f"re-synced to weight version {self.version}", file=sys.stderr)

    # -- health checks ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._probe_loop, name="slime-engine-health",
                                         daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _probe_loop(self) -> None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        cfg = self.config.ray
        while not self._stop.wait(cfg.health_check_interval_s):
            for i, handle in enumerate(self.handles):
                seen = self.generation[i]
                try:
                    ok = ray.get(handle.health.remote(), timeout=cfg.health_check_timeout_s)
                    if ok:
                        continue
                    cause: BaseException = RuntimeError(f"engine {i} reports unhealthy")
                    ray.kill(handle, no_restart=False)
                except GetTimeoutError as exc:  # hung: kill it so Ray restarts it
                    cause = exc
                    ray.kill(handle, no_restart=False)
                except RayActorError as exc:
                    cause = exc
                try:
                    self.recover(i, seen, cause)
                except Exception as exc:  # noqa: BLE001 - surfaced by the next generate
                    print(f"slime: health check could not recover engine {i}: {exc}",
                          file=sys.stderr)


# -- rollout manager --------------------------------------------------------------------------


class RolloutManagerWorker:
    def __init__(self, selection: PluginSelection, config: Any, engine_handles: list[Any]) -> None:
        from slime_core.rollout.components import attach_buffer_filter, has_eval, make_data_source
        from slime_core.rollout.manager import RolloutManager, start_rewards

        manager = bootstrap(selection, config)
        self.manager, self.config = manager, config
        self._rollout_sides: dict[str, Any] = {}  # schedule name -> its rollout side
        self._restarts_taken = 0  # supervisor restarts already reported by a rollout side
        self.supervisor = EngineSupervisor(config, engine_handles) if config.run.fault_tolerance else None
        self.engines = [RemoteEngine(h, i, self.supervisor) for i, h in enumerate(engine_handles)]
        # the reward workers first: their imports overlap the data's (as the local executor)
        rewards = start_rewards(manager, config, has_eval(config))
        try:
            self.sources = {"train": make_data_source(manager, config, "train")}
            if has_eval(config):
                self.sources["eval"] = make_data_source(manager, config, "eval")
            attach_buffer_filter(manager, config, self.sources["train"])
            self.rollouts = RolloutManager(config, self.engines, self.sources["train"],
                                           self.sources.get("eval"), rewards)
        except BaseException:
            rewards.close()
            raise
        if self.supervisor is not None:
            self.supervisor.start()

    def rollout(self, rollout_id: int, evaluation: bool = False) -> RolloutResult:
        before = self.supervisor.restarts if self.supervisor else 0
        result = self.rollouts.rollout(rollout_id, evaluation=evaluation)
        if self.supervisor is not None and not evaluation:
            result.metrics["rollout/engine_restarts"] = float(self.supervisor.restarts - before)
        return result

    def rollout_side_call(self, schedule: str, method: str, *args: Any) -> Any:
        """The one entry of every rollout schedule's rollout side: ``method(*args)`` of the
        object the record ``schedule`` builds here (``rollout_side(config, rollouts)``, on
        first use), looked up in this actor's registry (the driver's ``RayRolloutSide``
        handle sends its calls here, one at a time). The side calls the engines through this
        actor's :class:`RemoteEngine` objects, so the supervisor's restarts and re-sends serve
        it as they serve :meth:`rollout`; a call that returns a ``RolloutResult`` (or a tuple
        starting with one) reports ``rollout/engine_restarts`` since the previous such call."""
        side = self._rollout_sides.get(schedule)
        if side is None:
            side = build_rollout_side(self.manager.registries, self.config, self.rollouts,
                                      schedule)
            self._rollout_sides[schedule] = side
        out = getattr(side, method)(*args)
        result = out[0] if isinstance(out, tuple) and out else out
        if isinstance(result, RolloutResult) and self.supervisor is not None:
            # engines restart whenever they die, not per rollout: a step reports the
            # restarts since the previous step took its groups
            restarts = self.supervisor.restarts
            result.metrics["rollout/engine_restarts"] = float(restarts - self._restarts_taken)
            self._restarts_taken = restarts
        return out

    def source_state(self, split: str) -> dict[str, Any]:
        return self.sources[split].state_dict()

    def load_source_state(self, split: str, state: dict[str, Any]) -> None:
        self.sources[split].load_state_dict(state)

    def engine_version(self, index: int) -> int:
        return self.engines[index].weight_version()

    def set_resync_source(self, box: list[list[Any]], version: int) -> None:
        if self.supervisor is not None:
            self.supervisor.set_source(box[0], version)

    def restarts(self) -> int:
        return self.supervisor.restarts if self.supervisor else 0

    def shutdown(self) -> None:
        for side in self._rollout_sides.values():
            if hasattr(side, "stop"):
                side.stop()
        if self.supervisor is not None:
            self.supervisor.stop()
        self.rollouts.close()


# -- trainer ranks ----------------------------------------------------------------------------


class TrainerWorker:
    def __init__(self, selection: PluginSelection, config: Any, rank: int, world_size: int,
                 accelerator: str) -> None:
        self.manager = bootstrap(selection, config)
        self.config, self.rank, self.world_size = config, rank, world_size
        self.record, self.accelerator = make_accelerator(self.manager, accelerator)
        self.trainer: Any = None
        self.transport: Any = None
        self._server: Any = None
        self._resync: list[Any] = []

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def node_ip(self) -> str:
        import ray

        return str(ray.util.get_node_ip_address())

    def open_store(self, host: str) -> int:
        """Rank 0: the data-parallel rendezvous store (listening on ``host`` only)."""
        from slime_core.runtime.dist_group import StoreServer

        self._server = StoreServer(host, self.world_size, self.config.ray.collective_timeout_s)
        return self._server.port

    def init_dist(self, host: str, port: int, prefix: str) -> None:
        from slime_core.runtime.dist_group import init_data_parallel

        init_data_parallel(self.record.dist_backend, host, port, prefix, self.rank,
                           self.world_size, self.config.ray.collective_timeout_s, self._server)

    def build(self) -> tuple[int, int]:
        """Build this rank's trainer; its ``(data_parallel_rank, data_parallel_size)``."""
        from slime_core.executors.trainer_group import rank_layout

        rec = self.manager.registries.trainer_backend.get(self.config.train.backend)
        self.trainer = rec.factory(self.config, self.rank, self.world_size, self.accelerator)
        return rank_layout(self.trainer, self.rank, self.world_size)

    def join_export(self) -> None:
        """Take part in a collective weight export whose result rank 0 uses."""
        self.trainer.export_weights()

    def train_step(self, batch: Any, rollout_id: int) -> dict[str, float]:
        return self.trainer.train_step(batch, rollout_id)

    def compute_log_probs(self, batch: Any, role: str) -> list[Any]:
        return [t.cpu() for t in self.trainer.compute_log_probs(batch, role)]

    def save(self, path: str) -> None:
        self.trainer.save(path)

    def load(self, path: str) -> None:
        self.trainer.load(path)

    def export_weights(self) -> dict[str, Any]:
        return {k: v.detach().cpu() for k, v in self.trainer.export_weights().items()}

    def weights_digest(self) -> str:
        return weights_digest(self.trainer.export_weights())

    # -- weights (rank 0) ----------------------------------------------------------------------
    def send_weights(self, version: int, engine_handles: list[Any]) -> dict[str, float]:
        """The configured transport, from this rank's weights to every engine actor."""
        import ray

        if self.transport is None:
            reg = self.manager.registries.weight_transport
            self.transport = reg.get(self.config.weights.transport).factory(
                self.config, self.accelerator)
        engines = [RemoteEngine(h, i) for i, h in enumerate(engine_handles)]
        weights = distinct(self.trainer.export_weights())
        stats = dict(self.transport.send(weights, version, engines))
        if self.config.run.fault_tolerance:  # what a restarted engine is re-synced from
            self._resync = list(getattr(self.transport, "last_refs", []) or []) or [
                ray.put({k: v.detach().contiguous().cpu() for k, v in weights.items()})]
        return stats

    def resync_refs(self) -> list[list[Any]]:
        """The refs of the newest version, boxed so Ray hands them over unresolved."""
        return [self._resync]

    def reset_weight_group(self) -> None:
        if self.transport is not None and hasattr(self.transport, "reset"):
            self.transport.reset()
