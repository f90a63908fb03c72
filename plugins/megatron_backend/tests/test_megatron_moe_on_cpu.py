"""Mixture of experts on the megatron backend (issue 41): rollout routing replay on
megatron-core's router against the torch backend's replay, on the tiny Qwen3-MoE (8 experts,
top-2, renormalised gates)."""

from __future__ import annotations

import pytest
from mg_scenarios import replay_compare
from mg_support import base_data

LOGPROB_TOL = 1e-5
STEP_TOL = 1e-4


@pytest.mark.parametrize("gates", ["renormalised", "unnormalised"])
def test_routing_replay_matches_torch_backend(gates: str, request: pytest.FixtureRequest,
                                              one_thread: None) -> None:
    """Both gate rules (norm_topk_prob true / false). Replay exactness (the forward routes every position but a sample's last to its
    record, the rest to the router's own choice) and, with the same random records on both
    backends, the torch backend's replayed log-probs and step-1 loss, grad norm and agreement."""
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
