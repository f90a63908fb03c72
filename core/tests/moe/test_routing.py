"""Mixture-of-experts routers (slime_core.moe.routing): shapes, the replay's gate convention,
replay exactness, records and their checks, on tiny random Qwen3-MoE / OLMoE / Mixtral."""

from __future__ import annotations

import json

import pytest
import torch
from slime_core.models.loading import load_causal_lm
from slime_core.moe.preflight import hf_config
from slime_core.moe.routing import (
    MoeShape,
    RoutingControl,
    check_routes,
    config_moe_shape,
    from_record,
    moe_shape,
    to_record,
)
from slime_core.testing import TINY_OLMOE, TINY_QWEN2, TINY_QWEN3_MOE, build_test_config
from slime_hookspecs import RoutedExperts, Sample, SampleInvariantError

TINY_MIXTRAL = {
    "model_type": "mixtral", "vocab_size": 128, "hidden_size": 32, "intermediate_size": 16,
    "num_local_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}
FAMILIES = {"qwen3_moe": TINY_QWEN3_MOE, "olmoe": TINY_OLMOE, "mixtral": TINY_MIXTRAL}


def _model(init: dict) -> torch.nn.Module:
    config = build_test_config(model={"init_config": dict(init, initializer_range=0.2)})
    return load_causal_lm(config.model, "cpu", torch.float32, seed=3)


def _other_experts(ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Each row's experts shifted by one (still distinct within the row)."""
    return (ids.long() + 1) % num_experts


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shapes_from_config_and_model(family):
    init = FAMILIES[family]
    model = _model(init)
    config = build_test_config(model={"init_config": dict(init)})
    shape = moe_shape(model)
    assert shape == config_moe_shape(hf_config(config.model))
    assert shape is not None and shape.layers == 2 and shape.top_k == 2
    assert shape.dtype == torch.uint8
    dense = build_test_config(model={"init_config": dict(TINY_QWEN2)})
    assert config_moe_shape(hf_config(dense.model)) is None
    with pytest.raises(ValueError, match="no mixture-of-experts router"):
        RoutingControl(_model(TINY_QWEN2))


def test_sparse_step_and_dense_layers_are_not_counted():
    cfg = build_test_config(model={"init_config": dict(
        TINY_QWEN3_MOE, num_hidden_layers=4, mlp_only_layers=[0])}).model
    assert config_moe_shape(hf_config(cfg)) == MoeShape(layers=3, top_k=2, num_experts=8)
    assert MoeShape(layers=1, top_k=8, num_experts=300).dtype == torch.int16


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_replaying_the_routers_own_choice_changes_nothing(family):
    model = _model(FAMILIES[family])
    control = RoutingControl(model)
    ids = torch.randint(1, 128, (3, 7), generator=torch.Generator().manual_seed(0))
    plain = model(input_ids=ids).logits
    with control.recording():
        model(input_ids=ids)
        own = control.take()
    assert own.shape == (21, 2, 2)
    with control.replaying(own.long()):
        replayed = model(input_ids=ids).logits
    assert torch.equal(plain, replayed)  # bit for bit: same ids, same gate rule
    assert control.agreement() == 1.0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_replay_routes_to_the_given_experts(family):
    """Replay exactness: the forward uses the replayed ids (the recording inside a replay is
    what the experts module received), rows of -1 keep the router's own choice."""
    model = _model(FAMILIES[family])
    control = RoutingControl(model)
    ids = torch.randint(1, 128, (2, 5), generator=torch.Generator().manual_seed(1))
    with control.recording():
        plain = model(input_ids=ids).logits
        own = control.take().long()
    want = _other_experts(own, control.shape.num_experts)
    want[-1] = -1  # the last token of the second row: no record
    with control.recording(), control.replaying(want):
        replayed = model(input_ids=ids).logits
        used = control.take().long()
    assert torch.equal(used[:-1], want[:-1])
    assert torch.equal(used[-1], own[-1])
    assert not torch.allclose(plain, replayed)
    agree = control.agreement()
    assert agree is not None and agree < 1.0


def test_gate_weights_follow_the_models_normalisation():
    """Qwen3-MoE (norm_topk_prob): softmax over the chosen experts' logits; OLMoE (not
    normalised): the full softmax's probabilities of the chosen experts."""
    for init, normalised in ((TINY_QWEN3_MOE, True), (TINY_OLMOE, False)):
        model = _model(init)
        control = RoutingControl(model)
        router = control.routers[0]
        hidden = torch.randn(6, 32, generator=torch.Generator().manual_seed(2))
        chosen = torch.tensor([[3, 5]] * 6)
        with control.replaying(torch.stack([chosen, chosen], dim=1)):
            logits, gates, used = router(hidden)
        assert torch.equal(used, chosen)
        if normalised:
            expect = torch.softmax(logits.gather(-1, chosen), dim=-1)
        else:
            expect = torch.softmax(logits, dim=-1).gather(-1, chosen)
        torch.testing.assert_close(gates, expect)


def test_replay_gradients_reach_the_router():
    model = _model(TINY_QWEN3_MOE)
    control = RoutingControl(model)
    ids = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(3))
    with control.recording():
        model(input_ids=ids)
        own = control.take().long()
    with control.replaying(_other_experts(own, 8)):
        model(input_ids=ids).logits.sum().backward()
    assert all(r.weight.grad is not None and r.weight.grad.abs().sum() > 0
               for r in control.routers)


def test_records_round_trip_and_travel_with_samples():
    ids = torch.randint(0, 8, (5, 2, 2), dtype=torch.uint8)
    shape = MoeShape(layers=2, top_k=2, num_experts=8)
    rec = to_record(ids, shape)
    assert rec.nbytes == 20 and rec.shape == (5, 2, 2)
    assert torch.equal(from_record(rec), ids)
    wide = torch.tensor([[[299, 3]]], dtype=torch.int16)
    rec16 = to_record(wide, MoeShape(layers=1, top_k=2, num_experts=300))
    assert rec16.dtype == "int16" and torch.equal(from_record(rec16), wide)
    sample = Sample(tokens=list(range(6)), response_length=2, loss_mask=[1, 1],
                    rollout_log_probs=[0.0, 0.0], rollout_routed_experts=rec)
    sample.validate()
    back = Sample.from_dict(json.loads(json.dumps(sample.to_dict())))
    assert back.rollout_routed_experts == rec
    sample.tokens.append(7)
    sample.response_length += 1
    sample.loss_mask.append(1)
    sample.rollout_log_probs.append(0.0)
    with pytest.raises(SampleInvariantError, match="rollout_routed_experts covers 5 positions"):
        sample.validate()
    with pytest.raises(ValueError, match="needs 20 bytes"):
        RoutedExperts(shape=(5, 2, 2), dtype="uint8", data=b"\0" * 19)


def test_bad_records_are_refused_naming_sample_and_field():
    shape = MoeShape(layers=2, top_k=2, num_experts=8)
    where = "sample group=3 index=7: TrainBatch.routed_experts"
    good = torch.tensor([[[0, 1], [2, 3]]] * 4)
    check_routes(good, shape, 4, where)
    cases = [
        (good[:3], "shape \\(3, 2, 2\\), expected"),
        (good.float(), "expected an integer tensor"),
        (good + 6, "expert ids span \\[6, 9\\]"),
        (good - 1, "expert ids span \\[-1, 2\\]"),
        (torch.tensor([[[1, 1], [2, 3]]] * 4), "a position routes twice"),
        (good[..., :1], "shape \\(4, 2, 1\\), expected \\(len\\(tokens\\) - 1"),
    ]
    for ids, message in cases:
        with pytest.raises(ValueError, match=f"group=3 index=7: TrainBatch.routed_experts: {message}"):
            check_routes(ids, shape, 4, where)


def test_a_router_of_an_unknown_family_is_refused_by_name():
    class FooTopKRouter(torch.nn.Module):
        top_k, num_experts = 2, 4

    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model.add_module("router", FooTopKRouter())
    with pytest.raises(ValueError, match="router is a FooTopKRouter, whose gating rule is not known"):
        RoutingControl(model)


def test_the_opd_teacher_engine_is_built_without_replay():
    """A dense teacher scoring an MoE student's tokens: its engine config has replay off."""
    from slime_core.algo.opd import teacher_config

    config = build_test_config(model={"init_config": dict(TINY_QWEN3_MOE)},
                               train={"routing_replay": "rollout", "lr": 1e-4})
    teacher = teacher_config(config)
    assert teacher.train.routing_replay == "off" and teacher.train.lr == 1e-4
    assert config.train.routing_replay == "rollout"


def test_a_deep_copy_routes_with_its_own_weights_under_the_same_replay():
    """The trainer's old-actor snapshot is a deep copy of the policy: its routers compute
    with the copy's weights, and a replay of the policy's control applies to it too."""
    import copy

    model = _model(TINY_QWEN3_MOE)
    control = RoutingControl(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for r in twin.modules():
            if type(r).__name__ == "Qwen3MoeTopKRouter":
                r.weight.mul_(-1.0)  # the copy's routers now prefer other experts
    ids = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), control.recording():
        model(input_ids=ids)
        own = control.take().long()
        twin(input_ids=ids)
        twin_own = control.take().long()
    assert not torch.equal(own, twin_own)
    with torch.no_grad(), control.recording(), control.replaying(own):
        twin(input_ids=ids)
        assert torch.equal(control.take().long(), own)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fused_head_equals_the_model_forward_with_and_without_replay(family):
    """MoE models take the trainer's fused log-prob head; with routing replay too (values and
    gradients as through the model's own forward, the replayed ids honoured in both)."""
    from slime_core.trainkit.batching import response_log_probs
    from slime_core.trainkit.logprob_head import unsupported

    model = _model(FAMILIES[family])
    assert unsupported(model) is None
    control = RoutingControl(model)
    g = torch.Generator().manual_seed(5)
    tokens = [torch.randint(1, 128, (n,), generator=g) for n in (9, 5, 12)]
    resp = [4, 2, 6]
    tokens[1] = torch.cat([tokens[0][:5], tokens[1][:3]])  # a group: the shared-prefix pass
    resp[1] = 3
    routes = []
    for t in tokens:
        with torch.no_grad(), control.recording():
            model(input_ids=t[None])
            routes.append(_other_experts(control.take()[:-1].long(), control.shape.num_experts))
    for extra in ({}, {"routing": control, "routes": routes}):
        out = {}
        for fused in (False, True):
            model.zero_grad(set_to_none=True)
            lps, _ = response_log_probs(model, tokens, resp, 0.8, 0, fused_head=fused,
                                        shared_prefix=True, **extra)
            sum(lp.sum() for lp in lps).backward()
            out[fused] = (lps, {n: p.grad.clone() for n, p in model.named_parameters()
                                if p.grad is not None})
        for a, b in zip(out[False][0], out[True][0], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        for n, grad in out[False][1].items():
            torch.testing.assert_close(grad, out[True][1][n], atol=1e-5, rtol=1e-4, msg=n)
