"""slime_ppo under data parallelism: three gloo processes (one with an empty share) compute
GAE metrics and whitening over the whole batch and take the critic step of one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from slime_hookspecs import TrainBatch

# 3 groups of 2 samples; shares of 2, 1 and 0 groups (the last rank's share is empty)
SHARES = [[0, 1, 2, 3], [4, 5], []]
LENGTHS = [3, 5, 2, 4, 6, 2]
PROMPT = [5, 6, 7]


def _actor(device: torch.device) -> torch.nn.Module:
    return torch.nn.Linear(1, 1).to(device)


def _batch(idx: list[int]) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    tokens = [torch.tensor(PROMPT + torch.randint(3, 40, (n,), generator=g).tolist())
              for n in LENGTHS]
    masks = [torch.tensor([1.0] * (n - 1) + [0.0]) for n in LENGTHS]
    rewards = [1.0, 0.0, 0.5, 0.25, 1.0, 0.0]
    return TrainBatch(
        tokens=[tokens[i] for i in idx], response_lengths=[LENGTHS[i] for i in idx],
        loss_masks=[masks[i] for i in idx], rewards=[rewards[i] for i in idx],
        raw_rewards=[rewards[i] for i in idx], group_indices=[i // 2 for i in idx],
    )


def _run(make_config, num_ranks: int, idx: list[int], reducer: str) -> dict:
    """One critic update and GAE on ``idx``: advantages, metrics, critic weights."""
    from slime_ppo.critic import build_critic
    from slime_ppo.estimator import gae_estimate

    cfg = make_config(train={"num_ranks": num_ranks, "num_steps_per_rollout": 2},
                      algorithm={"advantage_estimator": "gae", "loss_reducer": reducer},
                      ppo={"critic_lr": 1e-2})
    torch.manual_seed(0)
    critic = build_critic(cfg, _actor(torch.device("cpu")))
    batch = _batch(idx)
    values = critic.values(batch.tokens, batch.response_lengths)
    adv, ret, metrics = gae_estimate(cfg, batch, values)
    metrics.update(critic.train(batch.tokens, batch.response_lengths, batch.loss_masks,
                                values, ret))
    state = critic.impl.optimizer.state_dict()["state"]
    return {"adv": [a.tolist() for a in adv], "metrics": metrics,
            "weights": {k: v.flatten()[:64].tolist()
                        for k, v in critic.impl.model.state_dict().items()},
            "exp_avg": {str(i): s["exp_avg"].flatten()[:64].tolist() for i, s in state.items()}}


def _rank(rank: int, world: int, init: str, reducer: str, tok_dir: str, out: str) -> None:
    import torch.distributed as dist
    from slime_core.config import load_config
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.config.schema import build_schema
    from slime_core.session import resolve
    from slime_core.testing import TINY_QWEN2

    manager, _ = resolve(PluginSelection(plugins=["slime_grpo", "slime_ppo"]), None, (), {})
    set_manager(manager)

    def make_config(**sections):
        data = {"model": {"tokenizer": tok_dir, "init_config": dict(TINY_QWEN2)}}
        data.update(sections)
        return load_config(build_schema(manager), None, (), data)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        result = _run(make_config, world, SHARES[rank], reducer)
    finally:
        dist.destroy_process_group()
    Path(f"{out}.{rank}").write_text(json.dumps(result))


@pytest.mark.parametrize("reducer", ["token_mean", "seq_mean_token_mean"])
def test_critic_and_gae_across_ranks_equal_one_process(make_config, tokenizer_dir, tmp_path,
                                                       reducer):
    import torch.multiprocessing as mp

    whole = _run(make_config, 1, [i for share in SHARES for i in share], reducer)
    out = str(tmp_path / "res")
    mp.start_processes(_rank, args=(3, f"file://{tmp_path / 'rdv'}", reducer,
                                    str(tokenizer_dir), out),
                       nprocs=3, join=True, start_method="spawn")
    ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(3)]
    for rank, idx in enumerate(SHARES):
        got = ranks[rank]
        for i, adv in zip(idx, got["adv"], strict=True):  # whitened with global statistics
            torch.testing.assert_close(torch.tensor(adv), torch.tensor(whole["adv"][i]),
                                       rtol=1e-5, atol=1e-5)
        for k, v in whole["metrics"].items():  # batch-wide metrics on every rank
            assert got["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
        # the critic took the single-process steps: AdamW's first moments are linear in the
        # gradients (fp32 sums in another order); the weights agree to 1% of a step (lr 1e-2:
        # Adam's normalisation amplifies rounding of near-zero gradient entries)
        scale = max(max(abs(x) for x in m) for m in whole["exp_avg"].values())
        assert got["exp_avg"].keys() == whole["exp_avg"].keys()
        for i, m in whole["exp_avg"].items():
            torch.testing.assert_close(torch.tensor(got["exp_avg"][i]), torch.tensor(m),
                                       rtol=1e-3, atol=1e-4 * scale)
        for name, w in whole["weights"].items():
            torch.testing.assert_close(torch.tensor(got["weights"][name]), torch.tensor(w),
                                       rtol=0, atol=1e-4)
    # the check can fail: the critic's weights did change in the step
    torch.manual_seed(0)
    from slime_ppo.critic import build_critic

    init = build_critic(make_config(), _actor(torch.device("cpu"))).impl.model.state_dict()
    assert any(not torch.allclose(init[k].flatten()[:64], torch.tensor(w))
               for k, w in whole["weights"].items())
