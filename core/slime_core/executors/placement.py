"""Placement of the ray executor's actors in one placement group (pure planning, no Ray).

Resources come from the accelerator record: ``ray_resource`` is ``CPU`` (devices are the
CPUs themselves), ``GPU`` (Ray's ``num_gpus``) or a custom resource such as Ascend's ``NPU``.

* ``colocate = false``: one bundle per trainer rank and one per engine, each
  ``{CPU: num_cpus_per_actor, <resource>: num_devices_per_actor}``: trainer and engines on
  separate devices;
* ``colocate = true``: one bundle per trainer rank; engine ``i`` joins bundle
  ``i % num_ranks``; the bundle's devices are split between its trainer rank (half) and its
  engines (the other half), so Ray gives them the same device (engines ``sleep()`` while the
  trainer trains);
* the rollout manager gets its own CPU-only bundle.

Several nodes: ``node_resources`` (``ray.trainer_resources`` / ``ray.engine_resources`` /
``ray.manager_resources``) adds custom resources to the bundles of one role, so that role's
bundles can only be placed on nodes that declare them (``ray start --resources``). The actors
themselves do not ask for these amounts: the bundle holds them, which is all Ray needs to pick
the node. A colocated bundle carries the trainer's and the engines' resources (the larger
amount where both name one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class ActorSlot:
    bundle: int
    num_cpus: float
    devices: dict[str, float] = field(default_factory=dict)  # resource name -> units

    def ray_options(self) -> dict[str, object]:
        """``num_cpus`` / ``num_gpus`` / ``resources`` for ``ActorClass.options(...)``."""
        opts: dict[str, object] = {"num_cpus": self.num_cpus}
        other = {k: v for k, v in self.devices.items() if k != "GPU"}
        if "GPU" in self.devices:
            opts["num_gpus"] = self.devices["GPU"]
        if other:
            opts["resources"] = other
        return opts


@dataclass
class PlacementPlan:
    bundles: list[dict[str, float]]
    trainers: list[ActorSlot]
    engines: list[ActorSlot]
    manager: ActorSlot

    def total(self, resource: str) -> float:
        return sum(b.get(resource, 0.0) for b in self.bundles)


ROLES = ("trainer", "engine", "manager")


def _merged(*parts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        for key, amount in part.items():
            out[key] = max(out.get(key, 0.0), float(amount))
    return out


def plan_placement(num_ranks: int, num_engines: int, resource: str, colocate: bool,
                   cpus_per_actor: float, devices_per_actor: float,
                   manager_cpus: float,
                   node_resources: dict[str, dict[str, float]] | None = None) -> PlacementPlan:
    """The bundles and each actor's slot; ``node_resources`` maps a role in :data:`ROLES` to
    the custom resources its bundles carry."""
    if num_ranks < 1 or num_engines < 1:
        raise ValueError(f"placement: need >= 1 trainer rank and engine, got {num_ranks}, "
                         f"{num_engines}")
    on_cpu = resource == "CPU"
    if on_cpu and cpus_per_actor <= 0:
        raise ValueError("ray.num_cpus_per_actor must be > 0 on the cpu accelerator")

    def device(units: float) -> dict[str, float]:
        return {} if on_cpu else {resource: units}

    extra = {role: dict((node_resources or {}).get(role) or {}) for role in ROLES}
    unknown = set(node_resources or {}) - set(ROLES)
    if unknown:
        raise ValueError(f"placement: unknown roles {sorted(unknown)}; choose from {ROLES}")
    for role, res in extra.items():
        clash = {"CPU", "GPU", resource} & set(res)
        if clash:  # the device amounts are the planner's; a label must be a resource of its own
            raise ValueError(f"ray.{role}_resources: {sorted(clash)} are device resources, not "
                             "node labels; name a custom resource the nodes declare")

    bundles: list[dict[str, float]] = []
    trainers: list[ActorSlot] = []
    engines: list[ActorSlot] = []
    if colocate:
        per_bundle = math.ceil(num_engines / num_ranks)
        for r in range(num_ranks):
            here = sum(1 for i in range(num_engines) if i % num_ranks == r)
            bundles.append({"CPU": cpus_per_actor * (1 + here), **device(devices_per_actor),
                            **_merged(extra["trainer"], extra["engine"] if here else {})})
            trainers.append(ActorSlot(r, cpus_per_actor, device(devices_per_actor / 2)))
        for i in range(num_engines):
            engines.append(ActorSlot(i % num_ranks, cpus_per_actor,
                                     device(devices_per_actor / 2 / per_bundle)))
    else:
        for r in range(num_ranks):
            bundles.append({"CPU": cpus_per_actor, **device(devices_per_actor), **extra["trainer"]})
            trainers.append(ActorSlot(r, cpus_per_actor, device(devices_per_actor)))
        for i in range(num_engines):
            bundles.append({"CPU": cpus_per_actor, **device(devices_per_actor), **extra["engine"]})
            engines.append(ActorSlot(num_ranks + i, cpus_per_actor, device(devices_per_actor)))
    bundles.append({"CPU": manager_cpus, **extra["manager"]})
    manager = ActorSlot(len(bundles) - 1, manager_cpus)
    for b in bundles:  # Ray refuses bundles whose every amount is zero
        if not any(v > 0 for v in b.values()):
            b["CPU"] = 0.01
    return PlacementPlan(bundles=bundles, trainers=trainers, engines=engines, manager=manager)
