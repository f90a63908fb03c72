"""The ``ray`` executor: the run's components as Ray actors in one placement group.

Actors (see :mod:`.ray_workers` for what runs inside, :mod:`.placement` for where):

* ``train.num_ranks`` trainer ranks (:class:`TrainerWorker`), one data-parallel
  ``torch.distributed`` group (the accelerator record's backend: gloo on CPU, nccl on GPU);
  rank 0 also sends weights;
* ``rollout.num_engines`` engines (:class:`EngineWorker`), threaded so ``abort``/``health``
  are answered during a ``generate``; restartable with ``run.fault_tolerance``;
* one rollout manager (:class:`RolloutManagerWorker`): data sources, rewards, filters and the
  rollout hooks, calling the engines through :class:`RemoteEngine`.

Data flow of a step: the driver asks the manager for a rollout (samples come back to the
driver: ``slime_log_rollout``, conversion and ``slime_rollout_data_postprocess`` fire there),
splits the train batch across ranks by token count without splitting groups
(:func:`~slime_core.executors.sharding.shard_by_tokens`), each rank trains on its share with
globally weighted, all-reduced gradients, and rank 0 pushes the new weights to the engines
through the configured transport. With ``ray.colocate`` the engines ``sleep()`` while the
ranks train. Everything crosses processes as picklable objects; no RPC of our own.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from slime_hookspecs import AcceleratorRecord, RolloutResult, TrainBatch

from slime_core.executors.base import check_weight_agreement, local_only_plugins
from slime_core.executors.placement import ActorSlot, plan_placement
from slime_core.executors.ray_cluster import RayConnection
from slime_core.executors.ray_workers import (
    EngineWorker,
    RemoteEngine,
    RolloutManagerWorker,
    TrainerWorker,
)
from slime_core.executors.trainer_group import TrainerGroup
from slime_core.pluginmgr import SlimePluginManager
from slime_core.rollout.components import has_eval
from slime_core.runtime.dist_group import is_loopback

_Trainer = ray.remote(TrainerWorker)
_Engine = ray.remote(EngineWorker)
_Manager = ray.remote(RolloutManagerWorker)


def wait_all(refs: list[Any], what: str) -> list[Any]:
    """Results in order; the first failure raises at once (a rank stuck in a collective
    waiting for a dead peer must not hide the dead peer's error)."""
    index = {r: i for i, r in enumerate(refs)}
    out: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for r in ready:
            try:
                out[index[r]] = ray.get(r)
            except Exception as exc:
                raise RuntimeError(f"{what}: actor {index[r]} failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
    return out


class RayFuture:
    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self) -> RolloutResult:
        return ray.get(self.ref)

    def done(self) -> bool:
        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)

    def exception(self) -> BaseException | None:
        """The rollout's error (``None``: it succeeded), waiting for it like ``result``."""
        try:
            ray.get(self.ref)
        except Exception as exc:  # noqa: BLE001 - returned, as Future.exception does
            return exc
        return None


class RemoteSource:
    """``state_dict`` / ``load_state_dict`` of a data source living in the rollout manager."""

    def __init__(self, actor: Any, split: str) -> None:
        self.actor, self.split = actor, split

    def state_dict(self) -> dict[str, Any]:
        return ray.get(self.actor.source_state.remote(self.split))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ray.get(self.actor.load_source_state.remote(self.split, state))


class ManagedEngineView:
    """What the driver checks before a rollout: the version as the rollout manager sees it
    (waits for a restart of that engine to finish)."""

    def __init__(self, actor: Any, index: int) -> None:
        self.actor, self.index = actor, index

    def weight_version(self) -> int:
        return int(ray.get(self.actor.engine_version.remote(self.index)))


class RayRollouts:
    def __init__(self, actor: Any, num_engines: int) -> None:
        self.actor = actor
        self.clients = [ManagedEngineView(actor, i) for i in range(num_engines)]

    def rollout(self, rollout_id: int, evaluation: bool = False) -> RolloutResult:
        return ray.get(self.actor.rollout.remote(rollout_id, evaluation))


class RayRolloutSide:
    """The driver's handle on a rollout schedule's ``rollout_side`` inside the rollout
    manager actor: ``handle.method(*args)`` is a blocking call of the actor's one generic
    entry ``rollout_side_call(name, method, *args)``."""

    def __init__(self, actor: Any, name: str) -> None:
        self.actor, self.name = actor, name

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any) -> Any:
            return ray.get(self.actor.rollout_side_call.remote(self.name, method, *args))

        return call


class RayTrainerGroup(TrainerGroup):
    """The :class:`~slime_hookspecs.Trainer` protocol over the trainer rank actors
    (sharding by data-parallel index: :class:`~slime_core.executors.trainer_group.TrainerGroup`)."""

    def __init__(self, ranks: list[Any], colocated_engines: list[RemoteEngine]) -> None:
        super().__init__(len(ranks))
        self.ranks = ranks
        self.colocated = colocated_engines

    def call(self, method: str, args: list[tuple[Any, ...]], what: str) -> list[Any]:
        return wait_all([getattr(r, method).remote(*a)
                         for r, a in zip(self.ranks, args, strict=True)], what)

    def call_rank0(self, method: str, args: tuple[Any, ...], what: str) -> Any:
        return wait_all([getattr(self.ranks[0], method).remote(*args)], what)[0]

    def _engines(self, method: str) -> None:
        from ray.exceptions import RayActorError

        for e in self.colocated:
            try:
                getattr(e, method)()
            except RayActorError:
                pass  # a dead engine is the rollout manager's to restart

    def train_step(self, batch: TrainBatch, rollout_id: int) -> dict[str, float]:
        self._engines("sleep")  # colocated: give the devices to the trainer
        try:
            return super().train_step(batch, rollout_id)
        finally:
            self._engines("wake_up")

    def on_rank0(self, method: str, *args: Any) -> Any:
        """``method`` on rank 0 while the other ranks join a collective weight export."""
        helpers = ([r.join_export.remote() for r in self.ranks[1:]]
                   if self.collective_export else [])
        result = wait_all([getattr(self.ranks[0], method).remote(*args)] + helpers,
                          f"{method} (trainer ranks)")
        return result[0]


class RayExecutor:
    def __init__(self, manager: SlimePluginManager, config: Any, run_dir: Path,
                 accel_record: AcceleratorRecord) -> None:
        self.config = config
        self.plan = plan_placement(
            config.train.num_ranks, config.rollout.num_engines, accel_record.ray_resource,
            config.ray.colocate, config.ray.num_cpus_per_actor, config.ray.num_devices_per_actor,
            config.ray.rollout_manager_cpus,
            {"trainer": config.ray.trainer_resources, "engine": config.ray.engine_resources,
             "manager": config.ray.manager_resources},
        )
        self._pg: Any = None
        self.ranks: list[Any] = []
        self.engine_handles: list[Any] = []
        self.manager_actor: Any = None
        self._restarts_seen = 0
        self.conn = RayConnection(config, self.plan.total("CPU"))
        try:
            self._start(manager, accel_record)
        except BaseException:
            self.shutdown()
            raise

    # -- start-up ----------------------------------------------------------------------------
    def _options(self, slot: ActorSlot, **extra: Any) -> dict[str, Any]:
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=self._pg, placement_group_bundle_index=slot.bundle)
        return {"scheduling_strategy": strategy, **slot.ray_options(), **extra}

    def _start(self, manager: SlimePluginManager, accel_record: AcceleratorRecord) -> None:
        cfg = self.config
        selection = manager.snapshot()
        only_here = local_only_plugins(manager, selection)
        if only_here:
            print(f"slime: plugin objects registered in the driver only ({', '.join(only_here)}):"
                  " their hooks fire in the driver, not in the Ray workers (rollout manager, "
                  "engines, trainer ranks); give importable modules in run.plugin_modules",
                  file=sys.stderr)
        self.accelerator = accel_record.factory()
        self._pg = placement_group(self.plan.bundles, strategy=cfg.ray.placement_strategy)
        try:
            ray.get(self._pg.ready(), timeout=cfg.ray.startup_timeout_s)
        except GetTimeoutError as exc:
            raise RuntimeError(
                f"ray: could not place bundles {self.plan.bundles} ({cfg.ray.placement_strategy}) "
                f"within ray.startup_timeout_s = {cfg.ray.startup_timeout_s}s; the cluster has "
                f"{ray.available_resources()} available"
            ) from exc
        self.placement = self._report_placement()
        name = accel_record.name
        world = cfg.train.num_ranks
        # trainer ranks first: slime_trainer_init fires before the engines exist, as locally
        self.ranks = [_Trainer.options(**self._options(slot)).remote(selection, cfg, r, world, name)
                      for r, slot in enumerate(self.plan.trainers)]
        if world > 1:
            self._init_data_parallel()
        layouts = wait_all([r.build.remote() for r in self.ranks], "building the trainer ranks")
        restarts = cfg.ray.max_engine_restarts if cfg.run.fault_tolerance else 0
        self.engine_handles = [
            _Engine.options(**self._options(slot, max_concurrency=8, max_restarts=restarts,
                                            max_task_retries=0)).remote(selection, cfg, i, name)
            for i, slot in enumerate(self.plan.engines)
        ]
        wait_all([h.ping.remote() for h in self.engine_handles], "starting the rollout engines")
        self.manager_actor = _Manager.options(**self._options(self.plan.manager)).remote(
            selection, cfg, self.engine_handles)
        ray.get(self.manager_actor.restarts.remote())
        self.engines = [RemoteEngine(h, i) for i, h in enumerate(self.engine_handles)]
        self.trainer = RayTrainerGroup(self.ranks, self.engines if cfg.ray.colocate else [])
        self.trainer.set_layout(layouts)
        self.rollouts = RayRollouts(self.manager_actor, len(self.engine_handles))
        self.train_source = RemoteSource(self.manager_actor, "train")
        self.eval_source = RemoteSource(self.manager_actor, "eval") if has_eval(cfg) else None

    def _report_placement(self) -> dict[str, list[str]]:
        """The node id of every actor's bundle, by role; printed when the run spans nodes."""
        from ray.util.placement_group import placement_group_table

        where = placement_group_table(self._pg).get("bundles_to_node_id", {})
        node = [str(where.get(i, "?")) for i in range(len(self.plan.bundles))]
        placement = {"trainer": [node[s.bundle] for s in self.plan.trainers],
                     "engine": [node[s.bundle] for s in self.plan.engines],
                     "manager": [node[self.plan.manager.bundle]]}
        if len(set(node)) > 1:
            short = {role: ", ".join(n[:8] for n in ids) for role, ids in placement.items()}
            print(f"slime: placement over {len(set(node))} nodes: trainer ranks on "
                  f"[{short['trainer']}], engines on [{short['engine']}], rollout manager on "
                  f"[{short['manager']}]", file=sys.stderr)
        return placement

    def _init_data_parallel(self) -> None:
        cfg = self.config
        host = cfg.ray.dist_host or "127.0.0.1"
        if host == "node":
            host = ray.get(self.ranks[0].node_ip.remote())
        # machines, not raylets: several raylets of one machine (ray.cluster_utils.Cluster, a
        # node per GPU set) all reach its loopback
        ips = set(ray.get([r.node_ip.remote() for r in self.ranks]))
        if len(ips) > 1 and is_loopback(host):
            raise RuntimeError(
                f"the trainer ranks span {len(ips)} machines ({', '.join(sorted(ips))}) but "
                "ray.dist_host is loopback; set ray.dist_host = 'node' (rank 0's address) on a "
                "trusted network"
            )
        port = ray.get(self.ranks[0].open_store.remote(host))
        prefix = f"slime-dp-{secrets.token_hex(16)}/"  # handed out through Ray only
        wait_all([r.init_dist.remote(host, port, prefix) for r in self.ranks],
                 "joining the data-parallel group")

    # -- driver interface ----------------------------------------------------------------------
    def send_weights(self, version: int) -> dict[str, float]:
        cfg = self.config
        if cfg.run.fault_tolerance:
            # an engine lost since the last rollout (its node died while the ranks trained)
            # is restarted and re-synced by the rollout manager before weights go out to it
            ray.get([self.manager_actor.engine_version.remote(i)
                     for i in range(len(self.engine_handles))])
            restarts = int(ray.get(self.manager_actor.restarts.remote()))
            if restarts != self._restarts_seen:  # a restarted engine left the broadcast group
                ray.get(self.ranks[0].reset_weight_group.remote())
                self._restarts_seen = restarts
        stats = self.trainer.on_rank0("send_weights", version, self.engine_handles)
        if cfg.run.fault_tolerance:
            box = ray.get(self.ranks[0].resync_refs.remote())
            ray.get(self.manager_actor.set_resync_source.remote(box, version))
        if cfg.weights.verify:
            check_weight_agreement(
                self.trainer.on_rank0("weights_digest"),
                ray.get([h.weights_digest.remote() for h in self.engine_handles]),
                version,
            )
            stats["verified"] = 1.0
        return stats

    def submit_rollout(self, rollout_id: int) -> RayFuture:
        return RayFuture(self.manager_actor.rollout.remote(rollout_id, False))

    def rollout_side(self, name: str) -> RayRolloutSide:
        return RayRolloutSide(self.manager_actor, name)

    def shutdown(self) -> None:
        actors = ([self.manager_actor] if self.manager_actor is not None else [])
        for actor in actors + self.engine_handles + self.ranks:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.manager_actor, self.engine_handles, self.ranks = None, [], []
        if self._pg is not None:
            try:
                remove_placement_group(self._pg)
            except Exception:  # noqa: BLE001
                pass
            self._pg = None
        self.conn.close()
