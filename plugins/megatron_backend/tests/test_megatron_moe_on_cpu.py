"""Mixture of experts on the megatron backend (issue 41), on the tiny Qwen3-MoE (8 experts,
top-2): rollout routing replay on megatron-core's router against the torch backend's replay,
and expert parallelism (EP=2 over two gloo processes) against the torch backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mg_scenarios import expert_parallel, replay_compare, router_loss_compare
from mg_support import base_data, spawn

LOGPROB_TOL = 1e-5
STEP_TOL = 1e-4


@pytest.mark.parametrize("gates", ["renormalised", "unnormalised"])
def test_routing_replay_matches_torch_backend(gates: str, request: pytest.FixtureRequest,
                                              one_thread: None) -> None:
    """Both gate rules (norm_topk_prob true / false). Replay exactness (the forward routes
    every position but a sample's last to its record, the rest to the router's own choice)
    and, with the same random records on both backends, the torch backend's replayed
    log-probs and step-1 loss, grad norm and agreement."""
    path = request.getfixturevalue("tiny_qwen3_moe" if gates == "renormalised"
                                   else "tiny_qwen3_moe_unnormalised")
    result = replay_compare(0, 1, base_data({"path": str(path)}))
    assert result["recorded"] and result["rest_own"] and result["differs_from_own"], result
    assert result["logprob_diff"] < LOGPROB_TOL, result
    assert result["replay_effect"] > 1e-2, result  # random records change the log-probs
    for key in ("loss", "pg_loss", "grad_norm"):
        a, b = result[key]
        assert abs(a - b) < STEP_TOL, (key, result)
    a, b = result["routing_replay_agreement"]
    assert a == b and 0 < a < 1, result  # the same choices agree (some, not all: random)


def _ep2(rank: int, world_size: int, path: str) -> dict[str, Any]:
    return expert_parallel(rank, world_size, base_data(
        {"path": path}, megatron={"expert_model_parallel_size": 2}, train={"num_ranks": 2}))


def test_expert_parallel_2_matches_torch_backend(tiny_qwen3_moe: Path) -> None:
    """EP=2 over two gloo processes (data parallel 2, each rank 4 of the 8 experts, tokens
    sent to their experts by megatron's alltoall dispatcher): the export gathers the experts
    back into the input weights exactly; each rank's log-probs (with and without routing
    replay) equal the torch backend's, and one GRPO step on the ranks' unequal shares (one rank
    idles through the other's extra micro-batch) equals the torch step on the whole batch."""
    per_rank = spawn(_ep2, 2, str(tiny_qwen3_moe))
    assert per_rank[0]["micro_batches"] != per_rank[1]["micro_batches"], per_rank
    for rank, result in enumerate(per_rank):
        assert result["dp"] == (rank, 2) and result["ep"] == (rank, 2), result
        assert result["local_experts"] == 4 * 2, result  # 4 experts x 2 layers
        assert result["export_keys_equal"] and result["export_exact"], result
        assert result["logprob_diff"] < LOGPROB_TOL, result
        assert result["replayed_logprob_diff"] < LOGPROB_TOL, result
        assert result["replay_effect"] > 1e-2, result
        for key in ("loss", "pg_loss", "grad_norm", "entropy"):
            a, b = result[key]
            assert abs(a - b) < STEP_TOL, (key, result)
        # every gradient element (clipped: the norm is ~4.3, the clip 1.0), experts included
        assert result["grad_diff"] < STEP_TOL, result
        assert result["grad_max"] > 1e-2, result
        assert result["update_cosine"] > 0.999, result
        assert result["experts_moved"] > 5e-4, result  # every expert, on either rank, stepped


@pytest.mark.parametrize("layers", [1, 2])
def test_router_losses_match_torch_backend(layers: int, request: pytest.FixtureRequest,
                                           one_thread: None) -> None:
    """``train.moe_aux_loss_coef`` / ``moe_z_loss_coef`` mapped onto megatron-core's
    "aux_loss" and z-loss (megatron_backend/router_losses.py): one GRPO step at one rank
    against the torch backend. One MoE layer: the same loss, grad norm, logged values and
    router gradients (the two load-balancing definitions coincide there). Two layers: the
    z-loss still matches exactly; megatron's load term is the mean of per-layer products,
    transformers' the product of the layers' pooled fractions: megatron's logged value equals
    the per-layer form computed from the torch model and differs from the pooled one."""
    path = request.getfixturevalue("tiny_qwen3_moe_one_layer" if layers == 1
                                   else "tiny_qwen3_moe")
    result = router_loss_compare(0, 1, base_data(
        {"path": str(path)}, train={"moe_aux_loss_coef": 0.1, "moe_z_loss_coef": 0.01}))
    a, b = result["moe_z_loss"]
    assert a is not None and a > 0 and abs(a - b) < 1e-4 * a, result
    a, b = result["moe_aux_loss"]
    assert a is not None and b is not None and a > 0, result
    if layers == 1:
        assert abs(a - b) < 1e-4 * a, result
        for key in ("loss", "grad_norm"):
            x, y = result[key]
            assert abs(x - y) < STEP_TOL, (key, result)
        assert result["router_grad_diff"] < STEP_TOL, result
        assert result["router_grad_max"] > 1e-2, result
    else:  # megatron's value is the mean of the per-layer transformers forms
        assert abs(b - result["per_layer_aux"]) < 1e-4 * b, result
        assert abs(a - b) > 1e-3, result  # which differs from the pooled one


def _router_losses_parallel(rank: int, world_size: int, path: str,
                            mg: dict[str, Any]) -> dict[str, Any]:
    ranks = world_size if "expert_model_parallel_size" in mg else 1
    return router_loss_compare(rank, world_size, base_data(
        {"path": path}, megatron=mg,
        train={"moe_aux_loss_coef": 0.1, "moe_z_loss_coef": 0.01, "num_ranks": ranks}))


@pytest.mark.parametrize("mg", [{"tensor_model_parallel_size": 2},
                                {"expert_model_parallel_size": 2}], ids=["tp2", "ep2"])
def test_router_losses_match_torch_backend_tp2_ep2(mg: dict[str, Any],
                                                   tiny_qwen3_moe_one_layer: Path) -> None:
    """TP = 2 (each TP rank routes every token: megatron's TP-summed counts are scaled back)
    and EP = 2 (two data-parallel replicas of the whole batch) over gloo: the one-layer step
    still equals the torch backend's, router gradients included."""
    for result in spawn(_router_losses_parallel, 2, str(tiny_qwen3_moe_one_layer), mg):
        for key in ("moe_aux_loss", "moe_z_loss"):
            a, b = result[key]
            assert a is not None and a > 0 and abs(a - b) < 1e-4 * a, (key, result)
        for key in ("loss", "grad_norm"):
            a, b = result[key]
            assert abs(a - b) < STEP_TOL, (key, result)
        assert result["router_grad_diff"] < STEP_TOL, result
        assert result["router_grad_max"] > 1e-2, result


def test_router_losses_under_routing_replay_match_torch_backend(
        tiny_qwen3_moe_one_layer: Path, one_thread: None) -> None:
    """With routing replay both backends count the router's own top-k in the load term (the
    forward dispatches to the replayed experts): the replayed step's loss and grad norm with
    the router losses on are the torch backend's, and the losses moved the grad norm."""
    path = {"path": str(tiny_qwen3_moe_one_layer)}
    off = replay_compare(0, 1, base_data(path))
    on = replay_compare(0, 1, base_data(path, train={"moe_aux_loss_coef": 0.1,
                                                      "moe_z_loss_coef": 0.01}))
    for key in ("loss", "grad_norm"):
        a, b = on[key]
        assert abs(a - b) < STEP_TOL, (key, on)
    assert abs(on["grad_norm"][0] - off["grad_norm"][0]) > 1e-3, (on, off)
