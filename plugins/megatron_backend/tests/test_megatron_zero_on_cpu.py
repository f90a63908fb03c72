"""``megatron.use_distributed_optimizer``: the sharded AdamW alone, on two gloo processes.

The trainer-level tests (one step equal to the torch backend's, exact resume, the PPO critic)
are in the numerics, checkpoint and PPO test files; here the optimizer's own contract: the
chunks cover every element once, the step equals torch's AdamW on the summed and clipped
gradients (a parameter with no gradient anywhere untouched, one with a gradient on one rank
only stepped), and a checkpoint of the other kind or size is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from megatron_backend.zero import _layout
from mg_support import spawn


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_the_chunks_cover_every_element_once(size: int) -> None:
    named = [("a", torch.nn.Parameter(torch.zeros(7))),
             ("b", torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float64))),
             ("frozen", torch.nn.Parameter(torch.zeros(5), requires_grad=False)),
             ("c", torch.nn.Parameter(torch.zeros(2, 5)))]
    seen: dict[str, list[int]] = {"a": [0] * 7, "b": [0] * 6, "c": [0] * 10}
    for rank in range(size):
        for bucket in _layout(named, rank, size):
            for piece in bucket.pieces:
                assert piece.shard.numel() == piece.hi - piece.lo
                for i in range(piece.lo, piece.hi):
                    seen[piece.name][i] += 1
    assert all(c == 1 for counts in seen.values() for c in counts), seen


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2),
                               torch.nn.Linear(2, 2))  # the last gets no gradient anywhere


def _grads(model: torch.nn.Module, rank: int) -> None:
    torch.manual_seed(10 + rank)
    x = torch.randn(4, 5).to(model[0].weight.dtype)
    out = model[1](model[0](x))
    loss = (out ** 2).sum() * 50  # large enough that the clip acts
    loss.backward()
    if rank == 1:  # a gradient on one rank only: the other's counts as zero
        model[0].bias.grad = None


def _worker(rank: int, world_size: int, ckpt: str) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron_backend import checkpoint, parallel
    from megatron_backend.zero import DistributedAdamW

    parallel.tp_size = lambda: 1  # no Megatron groups here: the norm is the DP group's alone
    adamw = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1}
    model = _model()
    opt = DistributedAdamW(list(model.named_parameters()), dist.group.WORLD, rank, world_size,
                           **adamw)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    results: dict[str, Any] = {}
    for step in range(2):
        opt.zero_grad()
        _grads(model, rank)
        results[f"norm{step}"] = opt.reduce_clip_step(set(), frozenset(), None, grad_clip=1.0)
    results["after"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    results["before"] = before
    results["state_elements"] = sum(s["exp_avg"].numel() for s in opt.state.values())
    # checkpoints: this rank's shard file, and the refusals
    model_file = str(Path(ckpt) / "model_optim.pt")
    checkpoint.save_optimizer_shard(opt, model_file)
    dist.barrier()
    errors = []
    plain = torch.optim.AdamW(model.parameters(), **adamw)
    for load in (lambda: checkpoint.load_optimizer(plain, None, model_file),
                 lambda: checkpoint.load_optimizer(opt, plain.state_dict(), model_file)):
        try:
            load()
        except (ValueError, FileNotFoundError) as exc:
            errors.append(str(exc))
    checkpoint.load_optimizer(opt, None, model_file)  # its own shard loads
    if world_size == 2:
        # the same files read by a run of one data-parallel rank (no collective is needed
        # to build it or to load)
        one_rank = DistributedAdamW(list(model.named_parameters()), dist.group.WORLD, 0, 1, **adamw)
        try:
            checkpoint.load_optimizer(one_rank, None, model_file)
        except ValueError as exc:
            errors.append(str(exc))
    results["errors"] = errors
    return results


def _reference(world_size: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    """torch's AdamW in one process on the gradients summed over the ranks, clipped."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-8,
                            weight_decay=0.1)
    norms = []
    for _ in range(2):
        opt.zero_grad()
        summed: dict[str, torch.Tensor] = {}
        for rank in range(world_size):
            replica = _model()
            replica.load_state_dict(model.state_dict())
            _grads(replica, rank)
            for name, p in replica.named_parameters():
                if p.grad is not None:
                    summed[name] = summed.get(name, torch.zeros_like(p)) + p.grad
        for name, p in model.named_parameters():
            p.grad = summed.get(name)
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
    return {k: v.detach() for k, v in model.state_dict().items()}, norms


def test_the_sharded_step_is_adamws_on_the_summed_gradients(tmp_path: Path) -> None:
    results = spawn(_worker, 2, str(tmp_path))
    want, norms = _reference(2)
    total = sum(p.numel() for p in _model().parameters())
    for rank, r in enumerate(results):
        for step in range(2):
            assert abs(r[f"norm{step}"] - norms[step]) < 1e-5 * norms[step], (rank, r, norms)
        for k, v in want.items():
            torch.testing.assert_close(r["after"][k], v, atol=1e-6, rtol=1e-6, msg=k)
        # no gradient on any rank: untouched (not even decayed)
        assert torch.equal(r["after"]["2.weight"], r["before"]["2.weight"])
        assert r["state_elements"] <= -(-total // 2)  # about half of AdamW's state each
        ok_shard = tmp_path / f"model_optim.dp{rank:03d}.pt"
        assert ok_shard.is_file()
        unsharded, other_kind, other_size = r["errors"]
        assert "use_distributed_optimizer = true" in unsharded
        assert "model_optim.dp" in other_kind and "use_distributed_optimizer = false" in other_kind
        assert "one of 2 optimizer shards" in other_size and "1 data-parallel" in other_size


def _bf16_worker(rank: int, world_size: int) -> list[torch.Tensor]:
    import torch.distributed as dist
    from megatron_backend import parallel
    from megatron_backend.zero import DistributedAdamW

    parallel.tp_size = lambda: 1
    model = _model().to(torch.bfloat16)
    opt = DistributedAdamW(list(model.named_parameters()), dist.group.WORLD, rank, world_size,
                           master_weights=True, lr=1e-5, weight_decay=0.1)
    for _ in range(3):
        opt.zero_grad()
        _grads(model, rank)
        opt.reduce_clip_step(set(), frozenset(), None, grad_clip=0.0)
    assert all(s.dtype == torch.float32 for s in opt.shards)  # fp32 master chunks
    return [p.detach().clone() for p in model.parameters()]


def test_a_bf16_model_steps_fp32_master_chunks() -> None:
    # the same as the one-process MasterAdamW on the summed gradients: lr 1e-5 updates that
    # stepping the bf16 weights would round away accumulate in the fp32 chunks
    from slime_core.api import make_adamw

    per_rank = spawn(_bf16_worker, 2)
    model = _model().to(torch.bfloat16)
    opt = make_adamw(model.parameters(), True, lr=1e-5, weight_decay=0.1)
    for _ in range(3):
        opt.zero_grad()
        grads = []
        for rank in range(2):
            replica = _model().to(torch.bfloat16)
            replica.load_state_dict(model.state_dict())
            _grads(replica, rank)
            grads.append([p.grad for p in replica.parameters()])
        for p, *gs in zip(model.parameters(), *grads, strict=True):
            present = [g for g in gs if g is not None]
            p.grad = sum(present[1:], present[0]) if present else None
        opt.step()
    for result in per_rank:
        for got, want in zip(result, model.parameters(), strict=True):
            assert torch.equal(got, want.detach())
