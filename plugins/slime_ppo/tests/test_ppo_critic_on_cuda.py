"""The critic on a CUDA device: values, a training step and a checkpoint agree with the CPU."""

import pytest
import torch
from slime_ppo.critic import build_critic


def _actor(device):
    return torch.nn.Linear(1, 1).to(device)


pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _data():
    g = torch.Generator().manual_seed(0)
    rlen = [3, 2, 4]
    tokens = [torch.randint(3, 100, (n,), generator=g) for n in (7, 5, 9)]
    masks = [torch.tensor([1.0, 1, 0]), torch.tensor([1.0, 1]), torch.tensor([0.0, 1, 1, 1])]
    returns = [torch.rand(r, generator=g) for r in rlen]
    return tokens, rlen, masks, returns


def test_critic_on_cuda_matches_cpu(make_config, tmp_path):
    tokens, rlen, masks, returns = _data()
    cfg = make_config(model={"dtype": "float32"}, ppo={"critic_lr": 1e-2})
    out = {}
    for dev in ("cpu", "cuda"):
        critic = build_critic(cfg, _actor(torch.device(dev)))
        assert next(critic.impl.model.parameters()).device.type == dev
        old = critic.values(tokens, rlen)
        assert all(v.device.type == "cpu" for v in old)  # values come back on the CPU
        m = critic.train(tokens, rlen, masks, old, returns)
        out[dev] = (old, m, critic.values(tokens, rlen), critic)
    (old_c, m_c, new_c, _), (old_g, m_g, new_g, gpu) = out["cpu"], out["cuda"]
    for a, b in zip(old_c + new_c, old_g + new_g, strict=True):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)
    for k in m_c:
        assert m_g[k] == pytest.approx(m_c[k], rel=1e-3, abs=1e-5), k
    gpu.save(str(tmp_path / "c"))
    cpu = build_critic(cfg, _actor(torch.device("cpu")))
    cpu.load(str(tmp_path / "c"))
    for a, b in zip(cpu.values(tokens, rlen), new_g, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
