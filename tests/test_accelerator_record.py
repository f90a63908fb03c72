"""Nothing assumes CUDA: a GRPO run on an accelerator record from a test plugin.

The ``fakedev`` record (``tests/accel_plugin.py``) is the CPU under names of its own: device type
``fakedev``, backend ``fakedev_ccl`` (a registered third-party torch.distributed backend, gloo
underneath), Ray resource ``FAKEDEV``. A 2-step GRPO run under the local and the ray executor
must take every device placement, process group and Ray resource request from it; what the
record's objects saw comes back through the plugin's per-process JSON lines.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import accel_plugin
from tests.conftest import read_metrics
from tests.ray_support import RAY_PLUGINS, run

ACCEL_PLUGIN = "tests.accel_plugin"
TRAINER = "slime_std.trainer.torch_trainer.TorchTrainer.__init__"
ENGINE = "slime_std.engine.local_engine._engine_device"


def read_records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(out.glob("*.jsonl"))
            for line in f.read_text().splitlines()]


def fakedev_config(base: dict[str, Any], accelerator: str, **sections: dict[str, Any]
                   ) -> dict[str, Any]:
    cfg = copy.deepcopy(base)
    cfg["run"].update(accelerator=accelerator, plugin_modules=[ACCEL_PLUGIN], num_threads=1)
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


def test_auto_picks_the_highest_priority_record() -> None:
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.runtime.accelerator import select_accelerator

    manager = SlimePluginManager(PluginSelection(plugins=[], modules=[ACCEL_PLUGIN])).load()
    rec = select_accelerator(manager, "auto")
    assert (rec.name, rec.device_type, rec.dist_backend, rec.ray_resource) == (
        "fakedev", "fakedev", "fakedev_ccl", "FAKEDEV")
    assert select_accelerator(manager, "fakedev") is rec


@pytest.mark.parametrize(("resources", "message"), [
    ({"GPU": 1}, "ray.resources.GPU: CPU and GPU are not custom resources"),
    ({"FAKEDEV": 0}, "ray.resources.FAKEDEV: must be > 0"),
])
def test_ray_resources_are_checked(resources: dict[str, float], message: str) -> None:
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    with pytest.raises(Exception, match=re.escape(message)):
        resolve(PluginSelection(plugins=[]), None, (), {"ray": {"resources": resources}})


def test_local_executor_places_everything_through_the_record(
        base_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    out = tmp_path / "records"
    out.mkdir()
    monkeypatch.setenv(accel_plugin.DIR_ENV, str(out))
    groups: list[str] = []  # one trainer rank in-process: no process group may appear
    monkeypatch.setattr(dist, "init_process_group",
                        lambda *a, **k: groups.append(str(k.get("backend", a[:1]))))
    monkeypatch.setattr(dist, "ProcessGroupGloo", lambda *a, **k: groups.append("gloo"))

    cfg = fakedev_config(base_config, "auto", rollout={"num_engines": 2})
    run_dir = run(cfg)
    assert [m["step"] for m in read_metrics(run_dir)] == [1, 2]

    recs = read_records(out)
    assert {r["pid"] for r in recs} == {os.getpid()}
    built = [r for r in recs if r["event"] == "accelerator"]
    assert [r["caller"] for r in built] == ["slime_core.executors.local.LocalExecutor.__init__"]
    devices = [r for r in recs if r["event"] == "device"]
    callers = [r["caller"] for r in devices]
    # the trainer's device, then one per engine (engine i asks for index i % device_count)
    assert callers.count(TRAINER) == 1 and callers.count(ENGINE) == 2, callers
    assert all(r["index"] == 0 for r in devices)
    assert groups == []


# -- ray ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fakedev_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One local Ray instance with 4 ``FAKEDEV`` units (declared through ``ray.resources``, the
    way a run starts it); workers record into the returned directory and spy on
    torch.distributed (the variables are inherited by the Ray processes started here)."""
    pytest.importorskip("ray")
    from slime_core.executors.ray_cluster import RayConnection
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    out = tmp_path_factory.mktemp("fakedev-records")
    _, config = resolve(PluginSelection(plugins=[]), None, (),
                        {"ray": {"num_cpus": 6, "resources": {accel_plugin.RESOURCE: 4}}})
    saved = {k: os.environ.get(k) for k in (accel_plugin.DIR_ENV, accel_plugin.SPY_ENV)}
    os.environ.update({accel_plugin.DIR_ENV: str(out), accel_plugin.SPY_ENV: "1"})
    try:
        conn = RayConnection(config, cpus_needed=6)
    finally:  # only the Ray processes keep them, not this one
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert conn.owned
    yield out
    conn.close()


@pytest.mark.ray
def test_ray_executor_places_everything_through_the_record(
        fakedev_ray: Path, base_config, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from slime_core.executors import ray_executor

    assert ray.cluster_resources().get(accel_plugin.RESOURCE) == 4
    options: list[dict[str, Any]] = []
    real_options = ray_executor.RayExecutor._options

    def spy_options(self: Any, slot: Any, **extra: Any) -> dict[str, Any]:
        opts = real_options(self, slot, **extra)
        options.append({k: v for k, v in opts.items() if k != "scheduling_strategy"})
        return opts

    monkeypatch.setattr(ray_executor.RayExecutor, "_options", spy_options)
    cfg = fakedev_config(
        base_config, "fakedev",
        run={"executor": "ray", "plugin_modules": [ACCEL_PLUGIN, RAY_PLUGINS]},
        train={"num_ranks": 2},
        rollout={"reward": "digit_fraction"},
        weights={"transport": "broadcast", "verify": True},
    )
    run_dir = run(cfg)
    metrics = read_metrics(run_dir)
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["perf/weight_sync_verified"] == 1.0 for m in metrics)

    # Ray resource requests: the placement group and every actor ask for FAKEDEV, never GPU
    tables = list(ray.util.placement_group_table().values())
    assert len(tables) == 1, tables
    bundles = list(tables[0]["bundles"].values())
    device_bundles = [b for b in bundles if accel_plugin.RESOURCE in b]
    assert len(device_bundles) == 3, bundles  # 2 trainer ranks + 1 engine, not colocated
    assert all(set(b) <= {"CPU", accel_plugin.RESOURCE} for b in bundles), bundles
    assert len(options) == 4  # 2 ranks, 1 engine, the rollout manager
    assert all("num_gpus" not in o and "accelerator_type" not in o for o in options), options
    assert [o.get("resources") for o in options] == [{"FAKEDEV": 1.0}] * 3 + [None]

    recs = read_records(fakedev_ray)
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        by_pid.setdefault(r["pid"], []).append(r)
    workers = {pid: rs for pid, rs in by_pid.items()
               if any(r["event"] == "accelerator" and r["assigned"] is not None for r in rs)}
    assert len(workers) == 3, by_pid  # 2 trainer ranks + 1 engine built the accelerator

    # what Ray gave each worker: its FAKEDEV unit, no GPU
    for rs in workers.values():
        (built,) = [r for r in rs if r["event"] == "accelerator"]
        assert built["assigned"].get(accel_plugin.RESOURCE) == 1.0, built
        assert "GPU" not in built["assigned"], built

    # device placement: each trainer rank's and the engine's device came from device()
    roles = sorted(
        "trainer" if TRAINER in callers else "engine" if ENGINE in callers else "?"
        for callers in ({r["caller"] for r in rs if r["event"] == "device"}
                        for rs in workers.values()))
    assert roles == ["engine", "trainer", "trainer"], by_pid

    # process groups: the data-parallel group (2 ranks) and the weight broadcast group
    # (rank 0 + the engine) were built by the record's backend; nothing built gloo or nccl
    # groups directly or initialised a default group with another backend
    inits = [r for r in recs if r["event"] == "init_process_group"]
    assert sorted(r["backend"] for r in inits) == ["fakedev_ccl"] * 2, inits
    assert [r for r in recs if r["event"] == "direct_group"] == []
    groups = [r for r in recs if r["event"] == "process_group"]
    assert sorted((r["caller"].rsplit(".", 1)[-1], r["size"], r["rank"]) for r in groups) == [
        ("_new_process_group_helper", 2, 0), ("_new_process_group_helper", 2, 1),
        ("new_group", 2, 0), ("new_group", 2, 1)], groups
