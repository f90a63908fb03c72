"""Training health (issue 38, item 1): a non-finite reward, advantage, loss or gradient norm
skips the optimizer step on every rank, and no checkpoint is written with a NaN weight."""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from slime_core.testing import build_test_config
from slime_core.trainkit.accumulate import Accumulation, rollout_optimizer_steps
from slime_core.trainkit.health import (
    SKIPPED_STEPS,
    NonFiniteWeightsError,
    TrainingHealth,
    check_finite_weights,
    nonfinite_key,
)
from slime_hookspecs import TrainBatch


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1)


def _step(model: torch.nn.Module, loss_scale: float, acc: Accumulation) -> dict[str, float]:
    """One optimizer step whose loss is ``loss_scale`` times a finite loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    opt.zero_grad()
    loss = model(torch.ones(2, 3)).sum() * loss_scale
    acc.backward(loss, {"train/loss": float(loss.detach())}, "samples", 2, 2.0)
    metrics, _ = acc.step(model, opt, 1.0)
    return metrics


def test_a_nan_loss_takes_no_optimizer_step() -> None:
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    acc = Accumulation(2, 2.0, False, "cpu")
    _step(model, float("nan"), acc)
    assert not acc.applied
    assert acc.skipped == {SKIPPED_STEPS: 1.0, nonfinite_key("loss"): 1.0,
                           nonfinite_key("grad_norm"): 1.0}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    # a finite step afterwards still steps (the watch is per step)
    acc = Accumulation(2, 2.0, False, "cpu")
    _step(model, 1.0, acc)
    assert acc.applied and acc.skipped == {}
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_huge_but_finite_loss_whose_gradient_overflows_is_skipped() -> None:
    model = _model()
    acc = Accumulation(2, 2.0, False, "cpu")
    _step(model, 1e38, acc)  # finite loss in fp32, an inf gradient norm
    assert not acc.applied and acc.skipped[nonfinite_key("grad_norm")] == 1.0
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def _batch(rewards: list[float], advantages: list[float]) -> TrainBatch:
    return TrainBatch(tokens=[torch.zeros(3)] * len(rewards), response_lengths=[1] * len(rewards),
                      loss_masks=[torch.ones(1)] * len(rewards), rewards=list(rewards),
                      raw_rewards=list(rewards),
                      advantages=[torch.tensor([a]) for a in advantages])


def test_the_batch_check_names_rewards_and_advantages() -> None:
    health = TrainingHealth()
    assert health.check_batch(_batch([1.0, 0.0], [0.5, -0.5])) == {}
    # 1e308 is finite, its group's advantages are not
    assert health.check_batch(_batch([1e308, 0.0], [float("nan")] * 2)) == {
        SKIPPED_STEPS: 1.0, nonfinite_key("advantages"): 1.0}
    assert nonfinite_key("rewards") in health.check_batch(_batch([float("inf"), 0.0], [0, 0]))


def test_a_bad_batch_runs_no_step_and_counts_every_skipped_one() -> None:
    config = build_test_config(train={"num_steps_per_rollout": 2})
    fired: list[int] = []
    pm = SimpleNamespace(hook=SimpleNamespace(
        slime_before_train_step=lambda **kw: fired.append(kw["step_id"])))
    scheduler = SimpleNamespace(get_last_lr=lambda: [1e-3])

    def step(mini: TrainBatch) -> dict[str, float]:
        raise AssertionError("no optimizer step may run on a non-finite batch")

    metrics = rollout_optimizer_steps(pm, config, _batch([1.0, 0.0], [float("nan"), 0.0]), 0,
                                      step, model=None, optimizer=None, scheduler=scheduler,
                                      started=0.0, health=TrainingHealth())
    assert fired == []
    assert metrics[SKIPPED_STEPS] == 2.0 and metrics[nonfinite_key("advantages")] == 1.0

    # one of two steps skipped: summed, not averaged; healthy metrics still averaged
    reports = iter([{"train/loss": 1.0, SKIPPED_STEPS: 0.0},
                    {"train/loss": 3.0, SKIPPED_STEPS: 1.0, nonfinite_key("loss"): 1.0}])
    metrics = rollout_optimizer_steps(pm, config, _batch([1.0, 0.0], [0.5, -0.5]), 0,
                                      lambda mini: next(reports), model=None, optimizer=None,
                                      scheduler=scheduler, started=0.0, health=TrainingHealth())
    assert metrics[SKIPPED_STEPS] == 1.0 and metrics[nonfinite_key("loss")] == 1.0
    assert metrics["train/loss"] == 2.0


def test_no_checkpoint_file_holds_a_nan_weight(tmp_path: Path) -> None:
    check_finite_weights([("w", torch.ones(2)), ("ids", torch.arange(3))], "fine")
    where = str(tmp_path / "model.safetensors")
    with pytest.raises(NonFiniteWeightsError, match=r"model\.safetensors.*layer\.1\.weight"):
        check_finite_weights([("layer.0.weight", torch.ones(2)),
                              ("layer.1.weight", torch.tensor([1.0, float("nan")]))], where)


# -- data parallelism: the ranks agree ---------------------------------------------------------
def _rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        result: dict[str, Any] = {}
        # rank 1's loss is NaN, rank 0's finite: both skip (and neither waits forever)
        model = _model()
        before = [p.detach().clone() for p in model.parameters()]
        acc = Accumulation(2, 2.0, True, "cpu")
        _step(model, float("nan") if rank == 1 else 1.0, acc)
        result["loss_applied"] = acc.applied
        result["unchanged"] = all(torch.equal(a, b)
                                  for a, b in zip(before, model.parameters(), strict=True))
        # only rank 0's share holds a NaN advantage: both see it
        health = TrainingHealth("cpu", None, True)
        result["batch"] = health.check_batch(
            _batch([1.0], [float("nan")] if rank == 0 else [0.5]))
        with open(os.path.join(out, f"{rank}.pkl"), "wb") as f:
            pickle.dump(result, f)
        # both ranks done with the group before either tears it down: a rank whose peer had
        # already gone aborted in gloo's teardown ("terminate called without an active
        # exception", about 1 run in 12 on 2 cores)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_data_parallel_ranks_agree_on_skipping() -> None:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_rank, args=(2, port, out), nprocs=2, join=True)
        results = [pickle.load(open(os.path.join(out, f"{r}.pkl"), "rb")) for r in range(2)]
    for r in results:
        assert r["loss_applied"] is False and r["unchanged"]
        assert r["batch"] == {SKIPPED_STEPS: 1.0, nonfinite_key("advantages"): 1.0}
