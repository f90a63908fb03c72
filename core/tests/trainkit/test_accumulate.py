"""``Accumulation``: micro-batch losses weighted by their share give the whole mini-batch's
gradient and metrics (token-mean and sample-mean losses); ``step_indices`` deals samples to
optimizer steps round-robin; ``rollout_optimizer_steps`` is the loop over them every trainer
backend runs."""

from __future__ import annotations

import pytest
import torch
from slime_core.trainkit.accumulate import Accumulation, rollout_optimizer_steps, step_indices


def _loss(model, xs, masks, weighting):
    per = [(model(x).squeeze(-1) ** 2) * m for x, m in zip(xs, masks, strict=True)]
    if weighting == "tokens":
        return sum(p.sum() for p in per) / sum(m.sum() for m in masks)
    return sum(p.sum() / m.sum() for p, m in zip(per, masks, strict=True)) / len(per)


@pytest.mark.parametrize("weighting", ["tokens", "samples"])
def test_micro_batches_sum_to_the_whole_mini_batch(weighting):
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 3, generator=g) for n in (2, 5, 3, 4)]
    masks = [torch.ones(len(x)) for x in xs]
    masks[1][0] = 0
    model = torch.nn.Linear(3, 1)
    whole = _loss(model, xs, masks, weighting)
    whole.backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    acc = Accumulation(len(xs), sum(float(m.sum()) for m in masks), False, "cpu")
    for mb in ([0, 1], [2], [3]):
        loss = _loss(model, [xs[i] for i in mb], [masks[i] for i in mb], weighting)
        acc.backward(loss, {"loss": float(loss.detach())}, weighting, len(mb),
                     sum(float(masks[i].sum()) for i in mb))
    for p, w in zip(model.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, w)
    assert acc.metrics["loss"] == pytest.approx(float(whole.detach()))
    norm = float(torch.linalg.vector_norm(torch.cat([w.flatten() for w in want])))
    before = [p.detach().clone() for p in model.parameters()]
    metrics, grad_norm = acc.step(model, torch.optim.SGD(model.parameters(), lr=1.0), 0.0)
    assert grad_norm == pytest.approx(norm) and metrics["loss"] == pytest.approx(float(whole.detach()))
    for p, b, w in zip(model.parameters(), before, want, strict=True):
        torch.testing.assert_close(p.detach(), b - w)  # unclipped SGD step


def test_no_masked_tokens_does_not_divide_by_zero():
    acc = Accumulation(2, 0.0, False, "cpu")
    assert acc.total_tokens == 1.0


def test_step_indices_round_robin():
    assert step_indices(5, 1) == [[0, 1, 2, 3, 4]]
    assert step_indices(5, 2) == [[0, 2, 4], [1, 3]]
    assert step_indices(2, 3) == [[0], [1], []]


def test_rollout_optimizer_steps_fires_the_hook_per_step_and_averages_what_each_reports():
    from types import SimpleNamespace

    from slime_core.testing import build_test_config
    from slime_hookspecs import TrainBatch

    config = build_test_config(train={"num_steps_per_rollout": 2})
    batch = TrainBatch(tokens=[torch.zeros(n) for n in (3, 4, 5)],
                       response_lengths=[1, 1, 1], loss_masks=[torch.ones(1)] * 3,
                       metadata={"metrics": {"critic/loss": 0.5}})
    fired = []
    pm = SimpleNamespace(hook=SimpleNamespace(
        slime_before_train_step=lambda **kw: fired.append((kw["step_id"], kw["model"]))))
    seen = []

    def step(mini):
        seen.append([len(t) for t in mini.tokens])
        # a metric only the first step reports is averaged over that step alone
        return {"loss": float(len(seen)), **({"only_first": 4.0} if len(seen) == 1 else {})}

    scheduler = SimpleNamespace(get_last_lr=lambda: [3e-4])
    metrics = rollout_optimizer_steps(pm, config, batch, 7, step, model="m", optimizer=None,
                                      scheduler=scheduler, started=0.0)
    assert fired == [(0, "m"), (1, "m")]
    assert seen == [[3, 5], [4]]  # step_indices' round-robin
    assert metrics["loss"] == 1.5 and metrics["only_first"] == 4.0
    assert metrics["critic/loss"] == 0.5 and metrics["train/lr"] == 3e-4
    assert metrics["perf/train_tokens_per_s"] > 0
