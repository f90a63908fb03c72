"""The ray executor on several Ray nodes, simulated on one machine (``ray.cluster_utils.Cluster``).

One cluster serves the module: a head node (the driver and the rollout manager), a trainer
node and an engine node, each a raylet of its own with a custom resource that names its role
(``slime_head`` / ``slime_trainer`` / ``slime_engine``); the run's ``ray.*_resources`` put each
role's bundles there. Every process of a run writes ``node-<role>-<Ray node id>-<pid>``
(``tests.ray_plugins``), so the tests see where it really ran. Node-failure tests remove a node
with ``cluster.remove_node`` (its raylet and every worker process on it die) and add a
replacement with the same resource.

All nodes share 127.0.0.1 (Ray's local-only switch, as for the executor's private instance),
so the torch.distributed stores on loopback are reachable from every node; what differs from
real machines is only the network. Select with ``-m ray``.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slime_hookspecs import hookimpl

from tests.conftest import read_metrics
from tests.ray_support import RAY_PLUGINS, ray_config, run

pytestmark = pytest.mark.ray

COMPARED = ("rollout/reward_mean", "rollout/reward_std", "rollout/response_length_mean",
            "train/loss", "train/grad_norm", "train/pg_loss", "train/entropy")
ROLES = {"head": {"num_cpus": 2}, "trainer": {"num_cpus": 3}, "engine": {"num_cpus": 2}}
ON_NODES = {"trainer_resources": {"slime_trainer": 0.01},
            "engine_resources": {"slime_engine": 0.01},
            "manager_resources": {"slime_head": 0.01}}


class SimCluster:
    """The module's cluster; ``node_of(role)`` -> Ray node id, ``replace(role)`` after a loss."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster
        from slime_core.executors.ray_cluster import loopback_only

        self.loopback_only = loopback_only
        self.nodes: dict[str, Any] = {}
        with loopback_only():
            self.cluster = Cluster(initialize_head=True, head_node_args=self._args("head"))
        self.nodes["head"] = self.cluster.head_node
        for role in ("trainer", "engine"):
            self.add(role)

    @staticmethod
    def _args(role: str) -> dict[str, Any]:
        return {**ROLES[role], "resources": {f"slime_{role}": 100.0},
                "node_ip_address": "127.0.0.1", "include_dashboard": False}

    def add(self, role: str) -> None:
        # a node started off the main thread (a test's watcher) cannot install Ray's SIGTERM
        # handler (signal.signal needs the main thread): start it without, and clean it up
        # at exit ourselves
        on_main = threading.current_thread() is threading.main_thread()
        self.cluster._shutdown_at_exit = on_main
        try:
            with self.loopback_only():
                node = self.cluster.add_node(**self._args(role))
        finally:
            self.cluster._shutdown_at_exit = True
        if not on_main:
            atexit.register(node.kill_all_processes, check_alive=False, allow_graceful=False)
        self.nodes[role] = node

    def remove(self, role: str) -> str:
        node = self.nodes.pop(role)
        self.cluster.remove_node(node)
        return str(node.node_id)

    def node_of(self, role: str) -> str:
        return str(self.nodes[role].node_id)


@pytest.fixture(scope="module")
def sim_cluster() -> Iterator[SimCluster]:
    ray = pytest.importorskip("ray")
    import ray._private.utils as ray_utils
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default,
        ensure_token_if_auth_enabled,
    )

    if ray.is_initialized():
        ray.shutdown()
    # token authentication as ray.init turns it on for a new cluster (Cluster alone does not)
    enable_token_auth_by_default()
    ensure_token_if_auth_enabled(None, create_token_if_missing=True)
    # Cluster records its address in /tmp/ray/ray_current_cluster, which any plain ray.init()
    # on this machine would then join (or fail on, once the cluster is gone): other runs share
    # the machine, so the record is kept out
    mp = pytest.MonkeyPatch()
    mp.setattr(ray_utils, "write_ray_address", lambda *a, **k: None)
    sim = SimCluster()
    try:
        with sim.loopback_only():  # else this driver takes the machine's address for its own
            ray.init(address=sim.cluster.address, logging_level="WARNING")
        yield sim
    finally:
        ray.shutdown()
        sim.cluster.shutdown()
        mp.undo()


def _config(base: dict[str, Any], marks: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    marks.mkdir(exist_ok=True)
    ray_sec = {**ON_NODES, **sections.pop("ray", {})}
    test_sec = {"node_dir": str(marks), **sections.pop("ray_test", {})}
    cfg = ray_config(base, ray=ray_sec, ray_test=test_sec, **sections)
    cfg["rollout"].setdefault("engine", "slow_local")  # announces its node
    cfg["rollout"]["reward"] = "digit_fraction"  # built in the rollout manager: announces it
    return cfg


def _where(marks: Path) -> dict[str, set[str]]:
    """role -> Ray node ids its processes ran on."""
    out: dict[str, set[str]] = {}
    for p in marks.glob("node-*"):
        _, role, node, _pid = p.name.split("-")
        out.setdefault(role, set()).add(node)
    return out


def _pids(marks: Path, role: str) -> set[int]:
    return {int(p.name.split("-")[3]) for p in marks.glob(f"node-{role}-*")}


class Watcher(threading.Thread):
    """Runs ``action()`` as soon as a marker matching ``pattern`` exists; ``check()`` re-raises
    what it raised (a failure on the thread must fail the test, not hang it)."""

    def __init__(self, marks: Path, pattern: str, action: Any, timeout: float = 900) -> None:
        super().__init__(daemon=True)
        self.marks, self.pattern, self.action, self.timeout = marks, pattern, action, timeout
        self.error: BaseException | None = None
        self.fired = False
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if any(self.marks.glob(self.pattern)):
                try:
                    self.action()
                    self.fired = True
                except BaseException as exc:  # noqa: BLE001 - handed to the test by check()
                    self.error = exc
                return
            time.sleep(0.05)

    def check(self) -> None:
        self.join(timeout=60)
        if self.error is not None:
            raise self.error
        assert self.fired, f"no marker {self.pattern} in {self.marks}: the action never ran"


class Samples:
    """Driver-side: each step's sample indices, groups and weight versions."""

    def __init__(self) -> None:
        self.indices: dict[int, list[int]] = {}
        self.groups: dict[int, list[int]] = {}
        self.versions: dict[int, list[int]] = {}

    @hookimpl
    def slime_log_rollout(self, config, rollout_id, samples, metrics):
        self.indices[rollout_id] = [s.index for s in samples]
        self.groups[rollout_id] = [s.group_index for s in samples]
        self.versions[rollout_id] = [v for s in samples for v in s.weight_versions]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> list[dict]:
    """The same 2-step run with the local executor: the metrics the cluster runs must match."""
    from slime_core.testing import TINY_QWEN2

    from tests.conftest import ARITH

    run_dir = tmp_path_factory.mktemp("one_node") / "run"
    cfg = {
        "run": {"num_rollouts": 2, "run_dir": str(run_dir), "progress": False,
                "loggers": ["jsonl"], "num_threads": 1, "plugin_modules": [RAY_PLUGINS]},
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl"), "eval_path": str(ARITH / "eval.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6,
                    "reward": "digit_fraction"},
        "train": {"lr": 1e-3},
    }
    return read_metrics(run(cfg))


@pytest.mark.parametrize("transport,colocate", [("ray", False), ("broadcast", False),
                                                ("ray", True)])
def test_roles_on_their_nodes_learn_as_on_one_node(sim_cluster, one_node, base_config,
                                                    tmp_path: Path, transport: str,
                                                    colocate: bool) -> None:
    """Trainer rank on the trainer node, engine on the engine node (or beside the trainer when
    colocated), rollout manager on the head; weights cross nodes every step (verified by
    digest); the metrics are the one-node run's to 1e-5 relative (same seed, one torch thread:
    see test_ray_executor's comparison)."""
    marks = tmp_path / "marks"
    ray_sec: dict[str, Any] = {"colocate": colocate}
    if colocate:  # the colocated bundle is a trainer bundle: the engine follows it
        ray_sec["engine_resources"] = {}
    cfg = _config(base_config, marks, ray=ray_sec,
                  weights={"transport": transport, "verify": True})
    m = read_metrics(run(cfg))
    where = _where(marks)
    engine_node = "trainer" if colocate else "engine"
    assert where["trainer"] == {sim_cluster.node_of("trainer")}
    assert where["engine"] == {sim_cluster.node_of(engine_node)}
    assert where["manager"] == {sim_cluster.node_of("head")}  # (the driver is on the head too)
    assert [x["step"] for x in m] == [x["step"] for x in one_node] == [1, 2]
    for ma, mb in zip(one_node, m, strict=True):
        for key in COMPARED:
            assert mb[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-7), (ma["step"], key)
        assert mb["perf/weight_sync_verified"] == 1.0 and mb["perf/weight_sync_bytes"] > 0


def test_engine_node_lost_mid_rollout_waits_for_a_replacement(sim_cluster, base_config,
                                                              tmp_path: Path) -> None:
    """run.fault_tolerance: the engine node dies while step 2 generates; the engine's bundle
    can only go to a node with ``slime_engine``, so the step waits until the test adds one,
    the engine restarts there, is re-synced to version 1 and serves the same requests."""
    marks, gens = tmp_path / "marks", tmp_path / "gens"
    gens.mkdir()
    cfg = _config(base_config, marks, run={"num_rollouts": 3, "fault_tolerance": True},
                  ray={"health_check_interval_s": 0.5},
                  weights={"transport": "ray", "verify": True},
                  ray_test={"marker_dir": str(gens), "delay_s": 1.0})
    lost: list[str] = []

    def lose_engine_node() -> None:
        lost.append(sim_cluster.remove("engine"))
        time.sleep(2.0)  # the loss is seen with no engine node in the cluster
        sim_cluster.add("engine")

    watcher = Watcher(gens, "gen-v1-*", lose_engine_node)
    seen = Samples()
    m = read_metrics(run(cfg, [seen]))
    watcher.check()
    assert [x["step"] for x in m] == [1, 2, 3]
    # nothing lost, nothing twice: 8 distinct samples of 2 groups a step, all from the weights
    # of their step (the restarted engine got version 1 before it generated)
    assert [x["rollout/samples"] for x in m] == [8.0, 8.0, 8.0]
    assert all(len(set(ix)) == 8 for ix in seen.indices.values())
    assert all(sorted(Counter(g).values()) == [4, 4] for g in seen.groups.values())
    assert seen.versions == {0: [0] * 8, 1: [1] * 8, 2: [2] * 8}
    assert [x["rollout/engine_restarts"] for x in m] == [0.0, 1.0, 0.0]
    assert all(x["perf/weight_sync_verified"] == 1.0 for x in m)
    assert _where(marks)["engine"] == {lost[0], sim_cluster.node_of("engine")}
    assert len(_pids(marks, "engine")) == 2
    lost_n = sum(8 - len(set(ix)) for ix in seen.indices.values())
    doubled = sum(len(ix) - len(set(ix)) for ix in seen.indices.values())
    print(f"node-failure figures (engine node lost in step 2, fault tolerance): steps "
          f"{len(m)}/3, samples {[int(x['rollout/samples']) for x in m]}, lost {lost_n}, "
          f"doubled {doubled}, restarts {[int(x['rollout/engine_restarts']) for x in m]}, "
          f"rollout seconds {[round(x['perf/rollout_time'], 1) for x in m]}")


def test_engine_node_lost_while_the_trainer_trains(sim_cluster, base_config,
                                                  tmp_path: Path) -> None:
    """run.fault_tolerance: the engine node dies during step 1's training (no generate in
    flight); the next rollout waits for the replacement node, gets a re-synced engine and
    completes with all its samples."""
    marks = tmp_path / "marks"
    cfg = _config(base_config, marks, run={"num_rollouts": 2, "fault_tolerance": True},
                  ray={"health_check_interval_s": 30.0},  # the driver's check meets it first
                  weights={"transport": "ray", "verify": True},
                  ray_test={"train_delay_s": 2.0})
    lost: list[str] = []

    def lose_engine_node() -> None:
        lost.append(sim_cluster.remove("engine"))
        time.sleep(2.0)
        sim_cluster.add("engine")

    watcher = Watcher(marks, "train-0-*", lose_engine_node)
    seen = Samples()
    m = read_metrics(run(cfg, [seen]))
    watcher.check()
    assert [x["step"] for x in m] == [1, 2]
    assert [x["rollout/samples"] for x in m] == [8.0, 8.0]
    assert all(len(set(ix)) == 8 for ix in seen.indices.values())
    assert seen.versions == {0: [0] * 8, 1: [1] * 8}
    assert all(x["perf/weight_sync_verified"] == 1.0 for x in m)
    assert _where(marks)["engine"] == {lost[0], sim_cluster.node_of("engine")}


def test_engine_node_lost_without_fault_tolerance_stops_and_resume_continues(
        sim_cluster, base_config, tmp_path: Path) -> None:
    marks, gens = tmp_path / "marks", tmp_path / "gens"
    gens.mkdir()
    cfg = _config(base_config, marks, run={"num_rollouts": 3, "save_interval": 1},
                  weights={"transport": "broadcast"},
                  ray_test={"marker_dir": str(gens), "delay_s": 1.0})
    run_dir = Path(cfg["run"]["run_dir"])
    watcher = Watcher(gens, "gen-v1-*", lambda: sim_cluster.remove("engine"))
    with pytest.raises(Exception, match="rollout engine 0 died.*run.fault_tolerance = true"):
        run(cfg)
    watcher.check()
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_000001"
    assert [x["step"] for x in read_metrics(run_dir)] == [1]
    sim_cluster.add("engine")
    run(cfg, resume=str(run_dir))  # the same config: resume refuses changed keys
    assert [x["step"] for x in read_metrics(run_dir)] == [1, 2, 3]
    assert (ckpts / "latest").read_text().strip() == "step_000003"
    print("node-failure figures (engine node lost in step 2, no fault tolerance): stopped "
          "after step 1 (checkpoint step_000001); resumed: one metrics row each for steps "
          "[1, 2, 3]")


def test_trainer_node_lost_stops_cleanly_and_resume_continues(sim_cluster, base_config,
                                                               tmp_path: Path) -> None:
    """The trainer node dies while step 2 trains (fault tolerance on: it covers engines only):
    the run stops naming the training, step 1's checkpoint and metrics row stay, and
    ``--resume`` on a replacement trainer node writes exactly one row per step."""
    marks = tmp_path / "marks"
    cfg = _config(base_config, marks,
                  run={"num_rollouts": 3, "save_interval": 1, "fault_tolerance": True},
                  train={"num_ranks": 2}, ray_test={"train_delay_s": 1.0})
    run_dir = Path(cfg["run"]["run_dir"])
    watcher = Watcher(marks, "train-1-*", lambda: sim_cluster.remove("trainer"))
    with pytest.raises(RuntimeError, match="train_step of rollout 1 .trainer ranks."):
        run(cfg)
    watcher.check()
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_000001"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step_")) == ["step_000001"]
    assert [x["step"] for x in read_metrics(run_dir)] == [1]
    sim_cluster.add("trainer")
    run(cfg, resume=str(run_dir))  # the same config: resume refuses changed keys
    assert [x["step"] for x in read_metrics(run_dir)] == [1, 2, 3]
    assert (ckpts / "latest").read_text().strip() == "step_000003"
    print("node-failure figures (trainer node lost in step 2): stopped after step 1 "
          "(checkpoint step_000001); resumed: one metrics row each for steps [1, 2, 3]")
    # the resumed ranks ran on the replacement node
    assert sim_cluster.node_of("trainer") in _where(marks)["trainer"]
