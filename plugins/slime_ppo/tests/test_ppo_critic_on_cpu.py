"""The critic: value positions, initialisation, micro-batch invariance, checkpoints, warm-up glue."""

from types import SimpleNamespace

import pytest
import torch
from slime_core.models.value import build_value_model
from slime_ppo import glue
from slime_ppo.critic import build_critic, critic_spec
from slime_std.trainer.critic import response_values

CPU = torch.device("cpu")


def _actor(device):
    """Stands for the actor that slime_trainer_init gets: the critic is built on its device."""
    return torch.nn.Linear(1, 1).to(device)


class PositionEcho(torch.nn.Module):
    """A fake critic whose value at a position is the token id there (to check alignment)."""

    def __init__(self, shape_suffix=(1,)):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.suffix = shape_suffix

    def forward(self, input_ids, attention_mask=None, **_):
        v = input_ids.float() * self.w
        for n in self.suffix:  # (1,): [B, L, 1]; (2,): a wrong [B, L, 2]
            v = v.unsqueeze(-1).expand(*v.shape, n)
        return SimpleNamespace(logits=v)


def test_value_of_token_t_is_read_at_the_position_before_it():
    # sample 0: prompt (10, 11), response (12, 13, 14) -> states end at 11, 12, 13
    # sample 1: prompt (20,), response (21,) -> state 20; padded to width 5 on the right
    tokens = [torch.tensor([10, 11, 12, 13, 14]), torch.tensor([20, 21])]
    vals = response_values(PositionEcho(), tokens, [3, 1])
    torch.testing.assert_close(vals[0], torch.tensor([11.0, 12.0, 13.0]))
    torch.testing.assert_close(vals[1], torch.tensor([20.0]))
    vals = response_values(PositionEcho(shape_suffix=()), tokens, [3, 1])  # [B, L] also accepted
    torch.testing.assert_close(vals[0], torch.tensor([11.0, 12.0, 13.0]))


def test_bad_critic_outputs_and_prompts_are_named():
    with pytest.raises(ValueError, match=r"one value per position \(1, 3\)"):
        response_values(PositionEcho(shape_suffix=(2,)), [torch.tensor([1, 2, 3])], [1])
    with pytest.raises(ValueError, match="sample 0 has 2 tokens and response length 2"):
        response_values(PositionEcho(), [torch.tensor([1, 2])], [2])


def test_policy_init_copies_the_policy_backbone(make_config):
    from slime_core.models.loading import load_causal_lm

    cfg = make_config()
    actor = load_causal_lm(cfg.model, CPU, torch.float32, seed=cfg.run.seed)
    critic = build_value_model(cfg, critic_spec(cfg), CPU, torch.float32)
    backbone = critic.backbone.state_dict()
    actor_base = actor.model.state_dict()
    assert backbone.keys() == actor_base.keys()
    for k, v in actor_base.items():
        assert torch.equal(backbone[k], v), k
    # head: N(0, 1/(hidden + 1)) seeded with run.seed, bias 0
    head = critic.value_head
    assert head.weight.shape == (1, 32) and torch.equal(head.bias, torch.zeros(1))
    assert 0 < float(head.weight.detach().std()) < 3 / 33
    again = build_value_model(cfg, critic_spec(cfg), CPU, torch.float32)
    assert torch.equal(again.value_head.weight, head.weight)  # deterministic

    rcfg = make_config(ppo={"critic_init": "random"})
    rand = build_value_model(rcfg, critic_spec(rcfg), CPU, torch.float32)
    emb = "embed_tokens.weight"
    assert not torch.equal(rand.backbone.state_dict()[emb], actor_base[emb])


def test_critic_from_slime_make_model_is_used(make_config, ppo_manager):
    from slime_hookspecs import hookimpl

    class Provider:
        @hookimpl
        def slime_make_model(self, config, role):
            return PositionEcho() if role == "critic" else None

    ppo_manager.register_object(Provider(), "critic_provider")
    try:
        critic = build_critic(make_config(), _actor(CPU))
    finally:
        ppo_manager.pluggy.unregister(name="critic_provider")
    assert isinstance(critic.impl.model, PositionEcho)
    vals = critic.values([torch.tensor([4, 5, 6])], [2])
    torch.testing.assert_close(vals[0], torch.tensor([4.0, 5.0]))  # states before 5 and 6


def _data():
    g = torch.Generator().manual_seed(0)
    lengths = [7, 5, 9, 6]
    rlen = [3, 2, 4, 3]
    tokens = [torch.randint(3, 100, (n,), generator=g) for n in lengths]
    masks = [
        torch.tensor([1.0, 1, 0]),
        torch.tensor([1.0, 1]),
        torch.tensor([0.0, 1, 1, 1]),
        torch.tensor([1.0, 0, 1]),
    ]
    returns = [torch.rand(r, generator=g) for r in rlen]
    return tokens, rlen, masks, returns


@pytest.mark.parametrize("reducer", ["seq_mean_token_mean", "token_mean"])
def test_critic_step_does_not_depend_on_the_micro_batch_budget(make_config, reducer):
    tokens, rlen, masks, returns = _data()
    states = []
    for budget in (1000, 1):  # one micro-batch vs one sample per micro-batch
        cfg = make_config(
            ppo={"critic_micro_batch_tokens": budget}, algorithm={"loss_reducer": reducer}
        )
        critic = build_critic(cfg, _actor(CPU))
        old = critic.values(tokens, rlen)
        m = critic.train(tokens, rlen, masks, old, returns)
        states.append((m, critic.impl.model.state_dict()))
    (m_big, s_big), (m_small, s_small) = states
    assert m_big["train/value_loss"] == pytest.approx(m_small["train/value_loss"], rel=1e-5)
    assert m_big["train/critic_grad_norm"] == pytest.approx(
        m_small["train/critic_grad_norm"], rel=1e-4
    )
    for k in s_big:
        torch.testing.assert_close(s_big[k], s_small[k], atol=1e-6, rtol=1e-5)


def test_critic_value_loss_matches_the_op_and_decreases(make_config, ppo_manager):
    from slime_ppo import ops

    tokens, rlen, masks, returns = _data()
    cfg = make_config(ppo={"critic_lr": 1e-2, "value_loss_coef": 1.0})
    critic = build_critic(cfg, _actor(CPU))
    old = critic.values(tokens, rlen)
    # one step on the initial weights: v == v_old, so clipping is inactive and clipfrac is 0
    # the critic reduces with the algorithm.loss_reducer record, the actor's
    reducer = ppo_manager.registries.loss_reducer.get(cfg.algorithm.loss_reducer).factory(
        cfg, rlen, masks)
    want, _ = ops.value_loss(old, old, returns, masks, value_clip=0.2, coef=1.0,
                             reducer=reducer)
    first = critic.train(tokens, rlen, masks, old, returns)
    assert first["train/value_loss"] == pytest.approx(float(want), rel=1e-5)
    assert first["train/value_clipfrac"] == 0.0 and first["train/critic_lr"] == 1e-2
    losses = [first["train/value_loss"]]
    for _ in range(15):
        losses.append(
            critic.train(tokens, rlen, masks, critic.values(tokens, rlen), returns)[
                "train/value_loss"
            ]
        )
    assert losses[-1] < 0.2 * losses[0]


def test_critic_takes_num_steps_per_rollout_optimizer_steps(make_config):
    tokens, rlen, masks, returns = _data()
    critic = build_critic(make_config(train={"num_steps_per_rollout": 3}), _actor(CPU))
    critic.train(tokens, rlen, masks, critic.values(tokens, rlen), returns)
    steps = {float(st["step"]) for st in critic.impl.optimizer.state_dict()["state"].values()}
    assert steps == {3.0}


def test_critic_save_load_round_trip(make_config, tmp_path):
    tokens, rlen, masks, returns = _data()
    cfg = make_config()
    critic = build_critic(cfg, _actor(CPU))
    critic.train(tokens, rlen, masks, critic.values(tokens, rlen), returns)
    critic.save(str(tmp_path / "c"), {"rewind_epoch": 3})
    fresh = build_critic(cfg, _actor(CPU))
    extra = fresh.load(str(tmp_path / "c"))
    assert extra["rewind_epoch"] == 3
    for k, v in critic.impl.model.state_dict().items():
        assert torch.equal(fresh.impl.model.state_dict()[k], v), k
    a, b = critic.impl.optimizer.state_dict(), fresh.impl.optimizer.state_dict()
    for pid, st in a["state"].items():
        assert torch.equal(st["exp_avg"], b["state"][pid]["exp_avg"])
    # identical next step from both
    m1 = critic.train(tokens, rlen, masks, critic.values(tokens, rlen), returns)
    m2 = fresh.train(tokens, rlen, masks, fresh.values(tokens, rlen), returns)
    assert m1 == m2
    with pytest.raises(FileNotFoundError, match="has no critic state"):
        fresh.load(str(tmp_path / "nothing"))


def test_frozen_loss_leaves_every_gradient_none():
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    lp = [model(torch.ones(2, 3)).squeeze(-1)]
    loss, metrics = glue.frozen_loss(lp)
    (loss * 0.5).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    assert all(p.grad is None for p in model.parameters())
    assert all(
        torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
    )  # no weight decay
    assert metrics == {"train/actor_frozen": 1.0, "train/loss": 0.0}


def test_scheduler_rewind_restores_the_lambda_position():
    p = torch.nn.Parameter(torch.ones(()))
    opt = torch.optim.AdamW([p], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for _ in range(3):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)
    glue.rewind_scheduler(opt, sched, 1)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5) and sched.get_last_lr() == [0.5]
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1 / 3)
