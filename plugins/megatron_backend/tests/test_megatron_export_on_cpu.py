"""Bucketed weight export (``megatron.export_bucket_mb``): the TP shards gathered in buckets
give exactly the tensors of one all-gather per tensor, with fewer collectives."""

from __future__ import annotations

from typing import Any

import torch
from mg_support import base_data, make_config, spawn


def _export(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron_backend import gather
    from megatron_backend.trainer import MegatronTrainer

    cfg = make_config(base_data(megatron={"tensor_model_parallel_size": 2},
                                train={"num_ranks": 2}))
    tr = MegatronTrainer(cfg, rank, world_size, None)
    calls = {"n": 0}
    real = dist.all_gather

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return real(*args, **kwargs)

    gather.dist.all_gather = counting  # type: ignore[attr-defined]
    out: dict[str, Any] = {}
    try:
        for mb in (0.0, 0.01, 0.5, 512.0):
            tr.mg.export_bucket_mb = mb
            calls["n"] = 0
            weights = tr.export_weights()
            out[str(mb)] = ({k: v.clone() for k, v in weights.items()}, calls["n"])
    finally:
        gather.dist.all_gather = real  # type: ignore[attr-defined]
    return out


def test_bucketed_export_equals_per_tensor_export_at_tp2() -> None:
    for r in spawn(_export, 2):
        per_tensor, n0 = r["0.0"]
        for mb in ("0.01", "0.5", "512.0"):
            weights, n = r[mb]
            assert sorted(weights) == sorted(per_tensor)
            for k, v in per_tensor.items():
                assert weights[k].shape == v.shape and torch.equal(weights[k], v), (mb, k)
            assert n <= n0 and (mb == "0.01" or n < n0), (mb, n, n0)
        assert r["512.0"][1] == 1  # one dtype, everything in one bucket
