"""Linear layers that add their weight gradient into ``.grad`` in the product
(:mod:`slime_core.trainkit.accumulating_linear`): the same gradients as autograd's, added up
over backward passes, only for the layers it may take, and the layers restored after."""

from __future__ import annotations

import pytest
import torch
from slime_core.testing import tiny_decoder
from slime_core.trainkit.accumulating_linear import (
    AccumulatingLinear,
    accumulating_linears,
    eligible,
)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(6, 10)
        self.b = torch.nn.Linear(10, 10, bias=False)
        self.head = torch.nn.Linear(10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        h = self.b(torch.relu(self.b(h)))  # one weight used twice: its products add up
        return self.head(h)


def _grads(net: torch.nn.Module, xs: list[torch.Tensor], fused: bool) -> dict[str, torch.Tensor]:
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    inputs = [x.clone().requires_grad_(True) for x in xs]
    for x in inputs:
        if fused:
            with accumulating_linears(net) as n:
                assert n == 3
                out = net(x)
        else:
            out = net(x)
        (out * torch.arange(1.0, 4.0)).sum().backward()
    got = {n: p.grad.clone() for n, p in net.named_parameters()}
    got.update({f"x{i}": x.grad for i, x in enumerate(inputs)})
    return got


def test_gradients_equal_autograds_and_add_up_over_passes():
    torch.manual_seed(0)
    net = _Net()
    xs = [torch.randn(4, 5, 6), torch.randn(2, 7, 6)]  # two passes, 3-D inputs
    want, got = _grads(net, xs, fused=False), _grads(net, xs, fused=True)
    assert set(got) == set(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=1e-5, msg=name)
    assert "forward" not in vars(net.a)  # the layers' own forward is back


def test_the_weight_gradient_is_added_not_returned():
    lin = torch.nn.Linear(4, 2)
    lin.weight.grad = torch.full_like(lin.weight, 5.0)
    x = torch.randn(3, 4)
    with accumulating_linears(lin):
        y = lin(x)
    assert y.grad_fn is not None and "AccumulatingLinear" in type(y.grad_fn).__name__
    y.sum().backward()
    torch.testing.assert_close(lin.weight.grad, 5.0 + torch.ones(3, 2).t() @ x)
    lin.weight.grad = None
    with accumulating_linears(lin) as n:
        assert n == 0  # no allocated gradient: autograd's own path
        lin(x).sum().backward()
    torch.testing.assert_close(lin.weight.grad, torch.ones(3, 2).t() @ x)


def test_a_gradient_dropped_before_the_backward_raises():
    lin = torch.nn.Linear(4, 2)
    lin.weight.grad = torch.zeros_like(lin.weight)
    with accumulating_linears(lin):
        y = lin(torch.randn(3, 4))
    lin.weight.grad = None
    with pytest.raises(RuntimeError, match="gradient is not allocated"):
        y.sum().backward()


def test_only_plain_trainable_linears_with_matching_gradients_are_taken():
    class Sub(torch.nn.Linear):
        pass

    def allocated(m: torch.nn.Linear) -> torch.nn.Linear:
        m.weight.grad = torch.zeros_like(m.weight)
        return m

    assert eligible(allocated(torch.nn.Linear(2, 2)))
    assert not eligible(torch.nn.Linear(2, 2))  # no gradient allocated
    assert not eligible(allocated(Sub(2, 2)))
    frozen = allocated(torch.nn.Linear(2, 2))
    frozen.weight.requires_grad_(False)
    assert not eligible(frozen)
    other = torch.nn.Linear(2, 2)
    other.weight.grad_dtype = None  # (torch refuses a gradient of another dtype otherwise)
    other.weight.grad = torch.zeros(2, 2, dtype=torch.float64)
    assert not eligible(other)
    assert not eligible(torch.nn.Embedding(3, 2))
    nested = allocated(torch.nn.Linear(2, 2))
    with accumulating_linears(nested):
        assert not eligible(nested)  # routed already: not taken twice


def test_the_function_alone_matches_f_linear():
    w = torch.randn(3, 4, requires_grad=True)
    w.grad = torch.zeros_like(w)
    x = torch.randn(5, 4, requires_grad=True)
    y = AccumulatingLinear.apply(x, w, None)
    torch.testing.assert_close(y, x @ w.t())
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, torch.ones(5, 3) @ w.detach())
    torch.testing.assert_close(w.grad, torch.ones(5, 3).t() @ x.detach())


def test_a_decoders_projections_are_all_routed():
    model = tiny_decoder("qwen2_gqa_bias").train()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    layers = len(model.model.layers)
    with accumulating_linears(model.model) as n:
        assert n == 7 * layers  # q, k, v, o, gate, up, down
