"""Device placement: every op accepts CUDA tensors (masks may stay on the CPU) and matches CPU."""

import pytest
import torch
from slime_grpo import ops

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _batch(device):
    g = torch.Generator().manual_seed(0)
    lens = [3, 5, 2, 4]
    lp = [(-torch.rand(n, generator=g)).to(device) for n in lens]
    old = [x + 0.1 * torch.randn(x.shape, generator=g).to(device) for x in lp]
    roll = [x + 0.05 * torch.randn(x.shape, generator=g).to(device) for x in old]
    masks = [
        torch.tensor([1, 1, 0]),
        torch.tensor([1, 0, 1, 1, 1]),
        torch.tensor([0, 0]),
        torch.ones(4),
    ]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], device=device)
    return lens, lp, old, roll, masks, rewards


def _run_all(device):
    lens, lp, old, roll, masks, rewards = _batch(device)
    lp = [x.clone().requires_grad_() for x in lp]
    out = {}
    kl = ops.compute_approx_kl_per_sample(lp, old, "k3")
    out["grpo"] = ops.grpo_advantages(rewards, lens, n_samples_per_prompt=2)
    out["rloo"] = ops.rloo_advantages(rewards, lens, n_samples_per_prompt=2)
    out["rpp"] = ops.reinforce_plus_plus_advantages(rewards, masks, kl=kl, kl_coef=0.1, gamma=0.9)
    out["rppb"] = ops.reinforce_plus_plus_baseline_advantages(
        rewards, masks, n_samples_per_prompt=2, kl=kl, kl_coef=0.1
    )
    adv = out["grpo"]
    reducer = ops.get_reducer("seq_mean_token_mean", lens, masks, rollout_ids=[0, 0, 1, 2])
    for name, fn in ops.POLICY_LOSSES.items():
        loss, metrics = fn(lp, old, adv, masks, metric_reducer=reducer)
        out[name] = [reducer(loss)] + list(metrics.values())
    pg, _ = ops.ppo_clip_loss(lp, old, adv, masks, eps_clip_c=3.0)
    for name, fn in ops.IS_CORRECTIONS.items():
        corrected, _, metrics = fn({"tis_clip_low": 0.5}, torch.cat(pg), old, roll, masks)
        out[name] = [corrected] + list(metrics.values())
    keep, m = ops.opsm_mask(lp, roll, adv, masks, opsm_delta=0.0)
    out["opsm"] = keep + list(m.values())
    out["sft"] = [ops.sft_loss(lp, masks)]
    total = reducer(torch.cat(pg)) + ops.sft_loss(lp, masks)
    total.backward()
    out["grad"] = [x.grad for x in lp]
    return out


def test_ops_run_on_cuda_and_match_cpu():
    cpu, gpu = _run_all("cpu"), _run_all("cuda")
    for key, values in cpu.items():
        for a, b in zip(values, gpu[key], strict=True):
            assert b.device.type in ("cuda", "cpu")
            torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5, msg=key)
    assert gpu["ppo"][0].device.type == "cuda" and gpu["grad"][0].device.type == "cuda"
