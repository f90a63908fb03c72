"""The trainer's log-prob head kernels (:mod:`slime_core.kernels.logprob_stats`) against the
torch functions, where the kernels run: on CUDA, or on the CPU under Triton's interpreter
(``TRITON_INTERPRET=1`` with triton installed). Skipped otherwise (the CPU install has no
triton); ``test_kernel_choice.py`` covers what runs without triton."""

from __future__ import annotations

import pytest
import torch
from slime_core import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(
    not kernels.available(DEVICE),
    reason="the Triton kernels need CUDA + triton (or TRITON_INTERPRET=1 with triton)")
# bf16 on CUDA (the dtype the engines and trainers use there); the interpreter computes with
# numpy, which has no bf16
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


@pytest.mark.parametrize("entropy", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_head_kernels_match_the_torch_functions(entropy: bool, temperature: float) -> None:
    from slime_core.trainkit.logprob_head import head_log_probs

    gen = torch.Generator().manual_seed(1)
    rows, d, vocab = (300, 64, 151936) if DEVICE == "cuda" else (37, 16, 5003)
    hidden = (3 * torch.randn(rows, d, generator=gen)).to(DEVICE, DTYPE)
    head = torch.nn.Linear(d, vocab, bias=False).to(DEVICE, DTYPE)
    target = torch.randint(0, vocab, (rows,), generator=gen).to(DEVICE)
    weights = torch.linspace(-1, 1, rows, device=DEVICE)
    results = {}
    for kernel in ("torch", "triton"):
        h = hidden.clone().requires_grad_(True)
        head.weight.grad = None
        lp, ent = head_log_probs(h, head, target, temperature, entropy=entropy, kernel=kernel)
        loss = (lp * weights).sum() + (0.3 * ent.sum() if ent is not None else 0.0)
        loss.backward()
        results[kernel] = (lp.detach(), ent, h.grad, head.weight.grad.clone())
    (lp0, e0, gh0, gw0), (lp1, e1, gh1, gw1) = results["torch"], results["triton"]
    torch.testing.assert_close(lp1, lp0, atol=1e-4, rtol=1e-5)
    if entropy:
        torch.testing.assert_close(e1.detach(), e0.detach(), atol=1e-4, rtol=1e-5)
    # the gradients are rounded to the logits' dtype by both, before the two products
    tol = 2e-2 if DTYPE == torch.bfloat16 else 1e-4
    torch.testing.assert_close(gh1.float(), gh0.float(), atol=tol, rtol=tol)
    torch.testing.assert_close(gw1.float(), gw0.float(), atol=tol, rtol=tol)
