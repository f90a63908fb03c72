"""Linear layers whose backward adds the weight's gradient into ``weight.grad`` in its product.

Eager autograd computes a linear layer's weight gradient into a new tensor (one matrix
product) and then adds it into ``weight.grad`` (``AccumulateGrad``: one more kernel reading
both and writing the sum). A matrix product can add into its output itself (``addmm`` with
``beta = 1``), which is what Megatron's gradient-accumulation fusion does. Inside the captured
training graphs of ``train.cuda_graphs`` (:func:`slime_core.trainkit.graphed_decoder.
capture_accumulating`), where the gradients are allocated once and stay the same tensors, the
additions were 576 of a SmolLM2 step's kernels (6.3 ms of elementwise work on an H100).

:func:`accumulating_linears` routes a module's plain :class:`torch.nn.Linear` layers through
:class:`AccumulatingLinear` while it is active: the forward is ``F.linear`` as before, the
backward returns the input's (and bias's) gradient to autograd and adds the weight's into
``weight.grad`` itself, so autograd's ``AccumulateGrad`` never runs for that weight (nor any
hook registered on it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
import torch.nn.functional as F


class AccumulatingLinear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` whose backward adds ``x``-weighted output gradients into
    ``weight.grad`` (which must be allocated, of the weight's shape and dtype) and returns no
    gradient for the weight."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.weight = weight  # the parameter itself: its .grad is the target
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        x, weight = ctx.saved_tensors
        grad_x = grad.matmul(weight) if ctx.needs_input_grad[0] else None
        g2 = grad.reshape(-1, grad.shape[-1])
        target = ctx.weight.grad
        if target is None:
            raise RuntimeError("AccumulatingLinear: the weight's gradient is not allocated")
        target.addmm_(g2.t(), x.reshape(-1, x.shape[-1]))
        grad_bias = g2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, None, grad_bias


def _accumulating_forward(layer: torch.nn.Linear) -> Any:
    def forward(x: torch.Tensor) -> torch.Tensor:
        return AccumulatingLinear.apply(x, layer.weight, layer.bias)  # type: ignore[no-any-return]

    return forward


def eligible(layer: torch.nn.Module) -> bool:
    """Whether ``layer`` is a plain linear layer (not a subclass with a forward of its own)
    with a trainable weight whose gradient is allocated with the weight's shape and dtype."""
    if type(layer) is not torch.nn.Linear or "forward" in vars(layer):
        return False
    w = layer.weight
    return bool(w.requires_grad and w.grad is not None and w.grad.shape == w.shape
                and w.grad.dtype == w.dtype and w.grad.device == w.device)


@contextmanager
def accumulating_linears(module: torch.nn.Module) -> Iterator[int]:
    """While active, every :func:`eligible` linear layer of ``module`` runs as
    :class:`AccumulatingLinear` (an autograd graph built meanwhile keeps doing so in its
    backward, after the context ends). Yields how many layers it routed."""
    layers = [cast(torch.nn.Linear, m) for m in module.modules() if eligible(m)]
    for m in layers:
        m.forward = _accumulating_forward(m)  # type: ignore[method-assign]
    try:
        yield len(layers)
    finally:
        for m in layers:
            del m.forward
