"""Device placement: the PPO ops accept CUDA tensors (masks may stay on the CPU) and match CPU."""

import pytest
import torch
from slime_ppo import ops

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _run_all(device):
    g = torch.Generator().manual_seed(0)
    lens = [3, 5, 2]
    masks = [torch.tensor([1, 1, 0]), torch.tensor([1, 0, 1, 1, 0]), torch.tensor([1, 1])]
    kl = [(0.1 * torch.randn(n, generator=g)).to(device) for n in lens]
    values = [torch.randn(n, generator=g).to(device) for n in lens]
    rewards = torch.tensor([1.0, 0.0, 1.0], device=device)
    tok = ops.kl_in_reward(rewards, kl, masks, kl_coef=0.05)
    adv, ret = ops.gae_advantages_and_returns(tok, values, masks, gamma=0.9, lam=0.95)
    white = ops.whiten(adv, masks)
    new_values = [
        (v + 0.3 * torch.randn(v.shape, generator=g).to(device)).requires_grad_() for v in values
    ]
    flat = torch.cat(masks)
    loss, metrics = ops.value_loss(new_values, values, ret, masks, value_clip=0.2,
                                   reducer=lambda x: (x * flat).sum() / flat.sum())
    loss.backward()
    return (
        tok
        + adv
        + ret
        + white
        + [loss.detach()]
        + list(metrics.values())
        + [v.grad for v in new_values]
    )


def test_ops_run_on_cuda_and_match_cpu():
    cpu, gpu = _run_all("cpu"), _run_all("cuda")
    for a, b in zip(cpu, gpu, strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
    assert gpu[0].device.type == "cuda"
