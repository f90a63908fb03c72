"""``train.master_weights``: AdamW on fp32 copies of a bf16 model's weights."""

from __future__ import annotations

import copy

import pytest
import torch
from slime_core.trainkit.master import MasterAdamW, init_adamw_state, make_adamw, step_bytes

ADAMW = {"lr": 1e-5, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.01}


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(64, 32).to(torch.bfloat16)


def _grads(model: torch.nn.Module, step: int) -> None:
    torch.manual_seed(100 + step)
    model(torch.randn(8, 64, dtype=torch.bfloat16)).float().pow(2).mean().backward()


def test_the_copies_follow_fp32_adamw_and_the_model_their_rounding() -> None:
    model = _model()
    opt = MasterAdamW(model.parameters(), **ADAMW)
    ref = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
    ref_opt = torch.optim.AdamW(ref, **ADAMW)
    plain = _model()
    plain_opt = torch.optim.AdamW(plain.parameters(), **ADAMW)
    for step in range(30):
        opt.zero_grad()
        _grads(model, step)
        for r, p in zip(ref, model.parameters(), strict=True):
            r.grad = p.grad.float()
        opt.step()
        ref_opt.step()
        plain_opt.zero_grad()
        _grads(plain, step)
        plain_opt.step()
    for m, r, p in zip(opt.masters, ref, model.parameters(), strict=True):
        assert torch.equal(m, r.detach())  # the same fp32 trajectory, given the same gradients
        assert torch.equal(p, r.detach().to(torch.bfloat16))
    # stepping the bf16 weights themselves loses most of it: lr * 30 is below most spacings
    w0 = _model().weight
    moved_master = (model.weight != w0).float().mean().item()
    moved_plain = (plain.weight != w0).float().mean().item()
    assert moved_master > 2 * moved_plain, (moved_master, moved_plain)


def test_state_dict_carries_the_copies_for_an_exact_resume() -> None:
    model = _model()
    opt = MasterAdamW(model.parameters(), **ADAMW)
    for step in range(3):
        opt.zero_grad()
        _grads(model, step)
        opt.step()
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = copy.deepcopy(opt.state_dict())  # as torch.save would freeze it
    opt.zero_grad()
    _grads(model, 3)
    opt.step()
    # a fresh model and optimizer loaded from the checkpoint take the same fourth step
    fresh = _model()
    fresh.load_state_dict(saved_model)
    fresh_opt = MasterAdamW(fresh.parameters(), **ADAMW)
    fresh_opt.load_state_dict(saved_opt)
    fresh_opt.zero_grad()
    _grads(fresh, 3)
    fresh_opt.step()
    for a, b in zip(opt.masters, fresh_opt.masters, strict=True):
        assert torch.equal(a, b)
    # a checkpoint of plain AdamW (master weights off, or older): the copies start from the
    # model, with a warning; one of another model is refused
    with pytest.warns(UserWarning, match="no fp32 master weights"):
        MasterAdamW(_model().parameters(), **ADAMW).load_state_dict(
            torch.optim.AdamW(_model().parameters(), **ADAMW).state_dict())
    other = torch.nn.Sequential(_model(), _model()).to(torch.bfloat16)
    with pytest.raises(ValueError, match="another model"):
        MasterAdamW(_model().parameters(), **ADAMW).load_state_dict(
            MasterAdamW(other.parameters(), **ADAMW).state_dict())


def test_a_weight_set_from_outside_is_read_again() -> None:
    model = _model()
    opt = MasterAdamW(model.parameters(), **ADAMW)
    with torch.no_grad():
        model.weight[0, 0] = 0.5  # e.g. a hook that sets weights after the optimizer exists
    opt.zero_grad()
    _grads(model, 0)
    opt.step()
    assert abs(float(opt.masters[0][0, 0]) - 0.5) < 1e-3
    assert abs(float(model.weight[0, 0]) - 0.5) < 1e-2


def test_make_adamw_copies_only_what_needs_copies() -> None:
    assert isinstance(make_adamw(_model().parameters(), True, **ADAMW), MasterAdamW)
    assert type(make_adamw(_model().parameters(), False, **ADAMW)) is torch.optim.AdamW
    fp32 = torch.nn.Linear(4, 4)
    assert type(make_adamw(fp32.parameters(), True, **ADAMW)) is torch.optim.AdamW


def test_only_weights_written_since_the_last_step_are_read_again() -> None:
    from slime_core.trainkit.master import WeightVersions

    a, b = torch.zeros(3), torch.zeros(3)
    versions = WeightVersions([a, b])
    assert versions.changed() == [0, 1]  # nothing marked yet
    versions.mark()
    assert versions.changed() == []
    b[1] = 2.0  # an in-place write through the tensor (or a view of it)
    assert versions.changed() == [1]
    versions.mark()
    a.data = torch.ones(3)  # new storage
    assert versions.changed() == [0]


def test_a_step_reads_no_unwritten_weight_and_reread_takes_data_writes() -> None:
    model = _model()
    opt = MasterAdamW(model.parameters(), **ADAMW)
    opt.zero_grad()
    _grads(model, 0)
    opt.step()
    # a write through .data bypasses the version counter: the step does not see it ...
    before = float(opt.masters[0][0, 1])
    model.weight.data[0, 1] = 0.25
    opt.zero_grad()
    _grads(model, 1)
    opt.step()
    assert abs(float(opt.masters[0][0, 1]) - before) < 1e-2
    # ... reread() does
    model.weight.data[0, 1] = 0.25
    opt.reread()
    assert abs(float(opt.masters[0][0, 1]) - 0.25) < 1e-3


@pytest.mark.parametrize("master", [False, True], ids=["adamw", "master"])
def test_step_bytes_counts_the_first_steps_states_then_only_the_temporaries(master) -> None:
    """What a step may allocate: before the first (an optimizer without state), the two
    moment buffers of every parameter (fp32 for the copies of a bf16 model), one multi-tensor
    temporary, and MasterAdamW's fp32 gradient copies; once the states exist (make_adamw
    creates them), only the temporaries are left."""
    model = torch.nn.Linear(8, 4).to(torch.bfloat16)
    model.requires_grad_(True)
    numel = sum(p.numel() for p in model.parameters())
    elem = 4 if master else 2
    lazy = (MasterAdamW(model.parameters(), lr=1e-3) if master
            else torch.optim.AdamW(model.parameters(), lr=1e-3))
    assert step_bytes(lazy) == numel * elem * (4 if master else 3)
    model(torch.ones(2, 8, dtype=torch.bfloat16)).sum().backward()
    lazy.step()
    assert step_bytes(lazy) == numel * elem * (2 if master else 1)
    assert step_bytes(make_adamw(model.parameters(), master, lr=1e-3)) == step_bytes(lazy)


_STATE_CASES = {
    "adamw": ({}, torch.float32, False, "cpu"),
    "foreach": ({"foreach": True}, torch.float32, False, "cpu"),
    "fused": ({"fused": True}, torch.float32, False, "cpu"),
    "amsgrad": ({"amsgrad": True}, torch.float32, False, "cpu"),
    "master": ({}, torch.bfloat16, True, "cpu"),
    # the step counter on the device (fused, capturable), as the CUDA trainers run it
    "cuda-fused": ({"fused": True}, torch.float32, False, "cuda"),
    "cuda-capturable": ({"capturable": True, "foreach": True}, torch.float32, False, "cuda"),
    "cuda-master-fused": ({"fused": True}, torch.bfloat16, True, "cuda"),
}


@pytest.mark.parametrize("case", list(_STATE_CASES))
def test_state_made_before_the_first_step_gives_the_lazy_states_updates(case) -> None:
    """make_adamw's optimizer (state created at once) steps a model bit for bit as torch's
    lazily initialized one does, over steps where one parameter has no gradient at first;
    and the state it makes is the one torch makes (keys, dtypes, devices)."""
    options, dtype, master, device = _STATE_CASES[case]
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 4)).to(device, dtype)
    models = [copy.deepcopy(base) for _ in range(2)]
    early = make_adamw(models[0].parameters(), master, **ADAMW, **options)
    assert all(early.state[p] for g in early.param_groups for p in g["params"])
    lazy_cls = MasterAdamW if master else torch.optim.AdamW
    lazy = lazy_cls(models[1].parameters(), **ADAMW, **options)
    for step in range(4):
        for model, opt in zip(models, (early, lazy), strict=True):
            opt.zero_grad(set_to_none=True)
            torch.manual_seed(100 + step)
            out = model(torch.randn(8, 16, dtype=dtype).to(device)).float().pow(2).mean()
            out.backward()
            if step == 0:  # the first layer's bias takes no part in the first step
                model[0].bias.grad = None
            opt.step()
        for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
            assert torch.equal(a, b), (case, step)
    for pa, pb in zip(early.param_groups[0]["params"], lazy.param_groups[0]["params"],
                      strict=True):
        sa, sb = early.state[pa], lazy.state[pb]
        assert sorted(sa) == sorted(sb)
        for key in sa:
            assert (sa[key].dtype, sa[key].device) == (sb[key].dtype, sb[key].device), key
            assert torch.equal(sa[key], sb[key]), (case, key)


def test_a_frozen_parameter_gets_no_state() -> None:
    """Handed every parameter (as the Megatron backend does), make_adamw gives a frozen one
    no moments: torch would never make them, since it never gets a gradient."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model[0].requires_grad_(False)
    opt = make_adamw(model.parameters(), False, lr=1e-3)
    assert not any(opt.state.get(p) for p in model[0].parameters())
    assert all(opt.state[p] for p in model[1].parameters())


def test_init_adamw_state_refuses_another_optimizer() -> None:
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(TypeError, match="SGD is not torch's Adam"):
        init_adamw_state(opt)
