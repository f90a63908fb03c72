"""Router auxiliary losses (``train.moe_aux_loss_coef`` / ``moe_z_loss_coef``): values against
transformers' ``load_balancing_loss_func`` and a hand z-loss, padding not counted; the keys'
checks (the trainer step: plugins/slime_std/tests/trainer/test_trainer_router_losses.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from slime_core.models.loading import load_causal_lm
from slime_core.moe.losses import RouterCapture
from slime_core.moe.preflight import check_router_losses
from slime_core.moe.routing import RoutingControl
from slime_core.testing import TINY_QWEN2, TINY_QWEN3_MOE, build_test_config


def _model() -> torch.nn.Module:
    config = build_test_config(model={"init_config": dict(TINY_QWEN3_MOE, initializer_range=0.2)})
    return load_causal_lm(config.model, "cpu", torch.float32, seed=3)


def _batch(pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 100, (3, 9), generator=g)
    attn = torch.ones_like(ids)
    for row, n in enumerate((9, 5, 7)):
        ids[row, n:], attn[row, n:] = pad, 0
    return ids, attn


def test_losses_equal_transformers_and_a_hand_z_loss_without_padding():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    model = _model()
    capture = RouterCapture(model)
    ids, attn = _batch(pad=0)
    with capture.capturing():
        out = model(input_ids=ids, attention_mask=attn, output_router_logits=True)
    aux, z = capture.losses(attn)
    cfg = model.config
    want = load_balancing_loss_func(out.router_logits, cfg.num_experts, cfg.num_experts_per_tok,
                                    attn)
    torch.testing.assert_close(aux, want.float(), rtol=1e-5, atol=1e-6)
    keep = attn.reshape(-1).bool()
    lse = torch.cat([lg[keep] for lg in out.router_logits]).logsumexp(-1)
    torch.testing.assert_close(z, lse.square().mean(), rtol=1e-5, atol=1e-6)
    assert aux > 0 and z > 0
    # the padding's tokens and routing do not count: other pad ids give the same values
    ids2, _ = _batch(pad=77)
    with capture.capturing():
        model(input_ids=ids2, attention_mask=attn)
    aux2, z2 = capture.losses(attn)
    torch.testing.assert_close((aux2, z2), (aux, z))
    # ... while counting them (no mask) changes them
    with capture.capturing():
        model(input_ids=ids2, attention_mask=attn)
    assert float(capture.losses(torch.ones_like(attn))[1].detach()) != pytest.approx(float(z.detach()))


def test_with_replay_the_load_counts_the_routers_own_choice():
    """Under replay the forward dispatches to the replayed experts; the load term still counts
    the router's own top-k (as transformers and megatron-core compute it)."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    model = _model()
    routing = RoutingControl(model)
    capture = RouterCapture(model)
    ids, attn = _batch(pad=0)
    n, shape = ids.numel(), routing.shape
    forced = torch.arange(shape.top_k).expand(n, shape.layers, shape.top_k).contiguous()
    with routing.replaying(forced), capture.capturing():
        model(input_ids=ids, attention_mask=attn)
    logits = list(capture.taken)
    aux, _ = capture.losses(attn)
    want = load_balancing_loss_func(tuple(logits), shape.num_experts, shape.top_k, attn)
    torch.testing.assert_close(aux, want.float(), rtol=1e-5, atol=1e-6)
    # counting the replayed experts (every token on 0..k-1) would give E x sum_j P_j instead
    keep = attn.reshape(-1).bool()
    probs = torch.cat([lg[keep] for lg in logits]).softmax(-1).mean(0)
    assert float(aux.detach()) != pytest.approx(float(shape.num_experts * probs[: shape.top_k].sum()))


def test_keys_are_checked_and_a_dense_model_is_refused_before_it_loads():
    with pytest.raises(ValueError, match="train.moe_aux_loss_coef"):
        build_test_config(train={"moe_aux_loss_coef": -0.1})
    with pytest.raises(ValueError, match="train.moe_z_loss_coef"):
        build_test_config(train={"moe_z_loss_coef": -1.0})
    manager = _manager(router_losses=True)
    dense = build_test_config(model={"init_config": TINY_QWEN2},
                              train={"moe_aux_loss_coef": 0.01})
    with pytest.raises(ValueError, match=r"train.moe_aux_loss_coef = 0.01: .*no mixture-of-experts"):
        check_router_losses(manager, dense)
    check_router_losses(manager, build_test_config(model={"init_config": TINY_QWEN2}))  # off
    moe = build_test_config(model={"init_config": TINY_QWEN3_MOE}, train={"moe_z_loss_coef": 1e-3})
    check_router_losses(manager, moe)
    # a backend whose record does not declare router_losses would ignore the keys: refused
    with pytest.raises(ValueError, match=r"train.moe_z_loss_coef = 0.001: trainer backend "
                                         r"'torch' .*does not add router losses"):
        check_router_losses(_manager(router_losses=False), moe)


def _manager(router_losses: bool) -> SimpleNamespace:
    """What the check reads of a plugin manager: the trainer backend's record."""
    record = SimpleNamespace(name="torch", owner="a test", router_losses=router_losses)
    registry = SimpleNamespace(get=lambda name, require_available=False: record)
    return SimpleNamespace(registries=SimpleNamespace(trainer_backend=registry))