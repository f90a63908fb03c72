"""The local executor with ``train.num_ranks = 2``: two spawned trainer rank processes on gloo.

The same checks as the ray executor's data-parallel test, without Ray: the two-rank gradient
equals the one-rank gradient on the same batch, weights reach the engine (digest-verified),
and checkpoints resume.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from slime_hookspecs import TrainBatch, hookimpl

from slime_core.executors.trainer_group import TrainerGroup, rank_layout
from tests.conftest import read_metrics
from tests.ray_support import RAY_PLUGINS, run


class Observer:
    def __init__(self) -> None:
        self.batches: dict[int, Any] = {}

    @hookimpl
    def slime_rollout_data_postprocess(self, config, rollout_id, batch):
        self.batches[rollout_id] = copy.deepcopy(batch)


def test_two_local_ranks_train_like_one(base_config: dict[str, Any]) -> None:
    cfg = copy.deepcopy(base_config)
    cfg["run"].update(num_rollouts=2, save_interval=1, num_threads=1, plugin_modules=[RAY_PLUGINS])
    cfg["train"].update(num_ranks=2)
    cfg["rollout"].update(reward="digit_fraction")
    cfg["weights"] = {"verify": True}
    obs = Observer()
    run_dir = run(cfg, [obs])
    m = read_metrics(run_dir)
    assert [x["step"] for x in m] == [1, 2]
    assert all(x["perf/weight_sync_verified"] == 1.0 for x in m)
    assert m[0]["train/dp_token_imbalance"] >= 1.0

    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve
    from slime_std.trainer.torch_trainer import TorchTrainer

    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), None, (), cfg)
    set_manager(manager)
    torch.set_num_threads(1)
    local = TorchTrainer(config, 0, 1, None)
    local_metrics = local.train_step(copy.deepcopy(obs.batches[0]), 0)
    assert local_metrics["train/grad_norm"] == pytest.approx(m[0]["train/grad_norm"], rel=1e-5)
    assert local_metrics["train/loss"] == pytest.approx(m[0]["train/loss"], rel=1e-5, abs=1e-7)

    # both ranks' checkpoints are usable: resume one more step from step 2
    cfg["run"].update(num_rollouts=3)
    resumed = read_metrics(run(cfg, [Observer()], resume=str(run_dir)))
    assert [x["step"] for x in resumed][-1] == 3


class _Recorder(TrainerGroup):
    """A group whose ranks are plain objects, to check the sharding by data-parallel index."""

    def __init__(self, layouts: list[tuple[int, int]]) -> None:
        super().__init__(len(layouts))
        self.set_layout(layouts)
        self.seen: list[list[int]] = []

    def call(self, method: str, args: list[tuple[Any, ...]], what: str) -> list[Any]:
        if method == "compute_log_probs":
            self.seen = [list(a[0].group_indices) for a in args]
            return [[torch.full((1,), float(g)) for g in a[0].group_indices] for a in args]
        return [{"r": r} for r in range(self.world_size)]

    def call_rank0(self, method: str, args: tuple[Any, ...], what: str) -> Any:
        return {"rank0": True}


def _batch(groups: list[int]) -> TrainBatch:
    n = len(groups)
    return TrainBatch(tokens=[torch.arange(4) for _ in range(n)], response_lengths=[1] * n,
                      loss_masks=[torch.ones(1)] * n, rewards=[0.0] * n,
                      group_indices=groups)


def test_ranks_of_one_replica_get_the_same_share() -> None:
    # 4 ranks, TP=2: ranks (0, 1) are data-parallel index 0, ranks (2, 3) index 1
    group = _Recorder([(0, 2), (0, 2), (1, 2), (1, 2)])
    assert group.collective_export
    out = group.compute_log_probs(_batch([0, 0, 1, 1, 2, 2, 3, 3]), "actor")
    assert group.seen[0] == group.seen[1] and group.seen[2] == group.seen[3]
    assert sorted(group.seen[0] + group.seen[2]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [float(t) for t in out] == [0, 0, 1, 1, 2, 2, 3, 3]  # back in batch order
    assert group.export_weights() == {"r": 0}  # every rank joined; rank 0's answer

    pure = _Recorder([(0, 2), (1, 2)])
    assert not pure.collective_export and pure.export_weights() == {"rank0": True}


def test_rank_layout_is_checked() -> None:
    class T:
        data_parallel_rank, data_parallel_size = 0, 3

    with pytest.raises(ValueError, match="do not divide world_size=4"):
        rank_layout(T(), 0, 4)
    assert rank_layout(object(), 1, 2) == (1, 2)
    with pytest.raises(ValueError, match="disagree"):
        _Recorder([(0, 1), (0, 2)])


def test_a_failing_rank_is_named(base_config: dict[str, Any]) -> None:
    cfg = copy.deepcopy(base_config)
    cfg["run"].update(num_rollouts=1, num_threads=1)
    cfg["train"].update(num_ranks=2)
    cfg["model"]["init_config"] = {**cfg["model"]["init_config"], "hidden_size": -1}
    with pytest.raises(Exception, match=r"trainer rank \d failed"):
        run(cfg)

