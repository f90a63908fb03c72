"""Vocabulary-parallel log-probs (``parallel_output=True``): the log-softmax over the TP-sharded
vocabulary equals the one over gathered logits, values and gradients, at TP=2.

The unit case splits random logits over two gloo ranks (the second slice ending in Megatron's
vocabulary padding) against ``torch.log_softmax`` on the whole row; the trainer case builds
the backend both ways (``megatron.vocab_parallel_logprobs``) on the tiny Llama and compares
response log-probs, and one GRPO step's loss, entropy and grad norm.
"""

from __future__ import annotations

from typing import Any

import torch
from mg_scenarios import _max_diff, off_policy
from mg_support import base_data, copy_batch, grpo_batch, make_config, spawn

TOL = 1e-5


def _unit(rank: int, world_size: int) -> dict[str, float]:
    import torch.distributed as dist
    from megatron_backend.vocab_parallel import log_probs_and_entropy

    g = torch.Generator().manual_seed(0)
    n, width, valid = 9, 16, 27  # 32 padded columns, 27 real tokens: rank 1 holds 5 pads
    full = torch.randn(n, 2 * width, generator=g) * 3
    target = torch.randint(0, valid, (n,), generator=g)
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    # reference: the plain log-softmax over the real columns
    ref_z = full[:, :valid].clone().requires_grad_(True)
    logp = torch.log_softmax(ref_z, -1)
    ref_lp = logp.gather(-1, target[:, None]).squeeze(-1)
    ref_ent = -(logp.exp() * logp).sum(-1)
    (a * ref_lp + b * ref_ent).sum().backward()
    # this rank's slice
    start = rank * width
    z = full[:, start:start + width].clone().requires_grad_(True)
    lp, ent = log_probs_and_entropy(z, target, start, valid - start, True, dist.group.WORLD)
    assert ent is not None
    (a * lp + b * ent).sum().backward()
    grads = [torch.empty_like(z) for _ in range(world_size)]
    dist.all_gather(grads, z.grad.contiguous())
    grad = torch.cat(grads, -1)
    # without the entropy: the log-prob's gradient alone
    z2 = full[:, start:start + width].clone().requires_grad_(True)
    lp2, _ = log_probs_and_entropy(z2, target, start, valid - start, False, dist.group.WORLD)
    lp2.sum().backward()
    ref_z2 = full[:, :valid].clone().requires_grad_(True)
    torch.log_softmax(ref_z2, -1).gather(-1, target[:, None]).sum().backward()
    g2 = [torch.empty_like(z2) for _ in range(world_size)]
    dist.all_gather(g2, z2.grad.contiguous())
    return {
        "lp": float((lp - ref_lp).abs().max()),
        "ent": float((ent - ref_ent).abs().max()),
        "grad": float((grad[:, :valid] - ref_z.grad).abs().max()),
        "pad_grad": float(grad[:, valid:].abs().max()),
        "grad_lp_only": float((torch.cat(g2, -1)[:, :valid] - ref_z2.grad).abs().max()),
        "targets_on_both": float(len({int(t) // width for t in target})),
    }


def test_vocab_parallel_log_softmax_matches_full_one_at_tp2() -> None:
    for r in spawn(_unit, 2):
        assert r["targets_on_both"] == 2, r  # targets in both slices
        for key in ("lp", "ent", "grad", "grad_lp_only"):
            assert r[key] < TOL, (key, r)
        assert r["pad_grad"] == 0.0


def _trainers(rank: int, world_size: int) -> dict[str, Any]:
    from megatron_backend.trainer import MegatronTrainer

    out: dict[str, Any] = {}
    batch = None
    for vp in (False, True):
        cfg = make_config(base_data(megatron={"tensor_model_parallel_size": 2,
                                              "vocab_parallel_logprobs": vp},
                                    train={"num_ranks": 2}))
        tr = MegatronTrainer(cfg, rank, world_size, None)
        if batch is None:
            batch = grpo_batch(tr.layout.vocab)
        lps = tr.compute_log_probs(copy_batch(batch), "actor")
        b = copy_batch(batch)
        off_policy(b, lps)
        out[str(vp)] = {"lps": lps, "metrics": tr.train_step(b, 0)}
    return out


def test_trainer_with_vocab_parallel_logprobs_matches_gathered_logits_at_tp2() -> None:
    for r in spawn(_trainers, 2):
        full, vp = r["False"], r["True"]
        assert _max_diff(full["lps"], vp["lps"]) < TOL
        for key in ("train/loss", "train/pg_loss", "train/entropy", "train/grad_norm"):
            assert abs(full["metrics"][key] - vp["metrics"][key]) < TOL, key
