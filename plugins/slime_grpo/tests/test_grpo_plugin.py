"""The slime_grpo plugin: every record is registered and callable on a small batch."""

from __future__ import annotations

import pytest
import torch

from slime_core.plugins import PluginSelection, SlimePluginManager
from slime_core.testing import build_test_config
from slime_hookspecs import TrainBatch


def _manager() -> SlimePluginManager:
    return SlimePluginManager(PluginSelection(plugins=["slime_grpo"])).load()


def _batch() -> TrainBatch:
    torch.manual_seed(0)
    lengths = [3, 2, 4, 1]
    lp = [torch.randn(n) * 0.1 - 1 for n in lengths]
    return TrainBatch(
        tokens=[torch.arange(n + 2) for n in lengths], response_lengths=lengths,
        loss_masks=[torch.ones(n) for n in lengths], rewards=[1.0, 0.0, 1.0, 1.0],
        raw_rewards=[1.0, 0.0, 1.0, 1.0], group_indices=[0, 0, 1, 1],
        rollout_log_probs=[x.clone() for x in lp], old_log_probs=[x.clone() for x in lp],
        ref_log_probs=[x - 0.05 for x in lp],
    )


def test_registration_hooks_list_every_record() -> None:
    pm = _manager().pm
    expect = {
        "slime_register_advantage_estimators": {"grpo", "dr_grpo", "gspo", "cispo", "rloo",
                                                "reinforce_plus_plus", "reinforce_plus_plus_baseline"},
        "slime_register_policy_losses": {"ppo", "gspo", "cispo"},
        "slime_register_kl_estimators": {"k1", "k2", "k3", "low_var_kl"},
        "slime_register_is_corrections": {"tis", "seq_tis", "icepop", "seq_mask_tis"},
        "slime_register_loss_reducers": {"token_mean", "seq_mean_token_mean",
                                         "seq_mean_token_sum", "seq_mean_token_sum_norm"},
    }
    for hook, names in expect.items():
        got = {r.name for rs in getattr(pm.hook, hook)() for r in rs}
        assert got == names, hook


def test_every_record_runs_on_a_batch() -> None:
    m = _manager()
    cfg = build_test_config(algorithm={"kl_in_reward_coef": 0.1, "is_kwargs": {"tis_clip": 2.0}})
    reg = m.registries
    for rec in reg.advantage_estimator:
        adv, ret = rec.factory(cfg, _batch())
        assert [a.numel() for a in adv] == [3, 2, 4, 1], rec.name
        assert all(torch.isfinite(a).all() for a in adv), rec.name
    batch = _batch()
    batch.advantages, _ = reg.advantage_estimator.get("grpo").factory(cfg, batch)
    # GRPO by hand: group 0 rewards [1, 0]: mean 0.5, std (unbiased) 0.7071 -> +-0.7071
    assert torch.allclose(batch.advantages[0], torch.full((3,), 0.5 / (2 ** 0.5 / 2 + 1e-6)))
    # group 1 rewards [1, 1]: zero std -> advantage 0
    assert torch.equal(batch.advantages[2], torch.zeros(4))
    log_probs = [x.clone().requires_grad_(True) for x in batch.old_log_probs]
    for rec in reg.policy_loss:
        pg, metrics = rec.factory(cfg, batch, log_probs)
        assert [p.numel() for p in pg] == [3, 2, 4, 1] and "train/pg_clipfrac" in metrics or rec.name == "cispo"
    for rec in reg.kl_estimator:
        kl = rec.factory(batch.old_log_probs[0], batch.ref_log_probs[0])
        assert kl.shape == (3,)
    for rec in reg.is_correction:
        pg, masks, metrics = rec.factory(cfg, [torch.ones(n) for n in batch.response_lengths],
                                         batch.old_log_probs, batch.rollout_log_probs, batch.loss_masks)
        assert metrics["mismatch_abs_logprob_diff"] == 0.0, rec.name
    for rec in reg.loss_reducer:
        red = rec.factory(cfg, batch.response_lengths, batch.loss_masks)
        value = red([torch.ones(n) for n in batch.response_lengths])
        # all-ones loss: means give 1, sums give mean length 2.5, Dr. GRPO 2.5 / max_new_tokens
        want = {"token_mean": 1.0, "seq_mean_token_mean": 1.0, "seq_mean_token_sum": 2.5,
                "seq_mean_token_sum_norm": 2.5 / cfg.rollout.max_new_tokens}[rec.name]
        assert float(value) == pytest_approx(want), rec.name


def pytest_approx(x: float):  # noqa: ANN201 - tiny local helper keeps the asserts readable
    import pytest

    return pytest.approx(x)


@pytest.mark.parametrize("algorithm,match", [
    ({"advantage_estimator": "reinforce_plus_plus"}, "whitens over the whole batch"),
    ({"advantage_estimator": "reinforce_plus_plus_baseline"}, "whitens over the whole batch"),
    ({"advantage_estimator": "grpo", "whiten_advantages": True}, "whiten_advantages = true"),
])
def test_batch_wide_whitening_under_data_parallel_is_refused(algorithm, match) -> None:
    from slime_core.session import resolve

    data = {"train": {"num_ranks": 2}, "algorithm": algorithm}
    with pytest.raises(ValueError, match=match):
        resolve(PluginSelection(plugins=["slime_grpo"], autoload=False), data=data)
    resolve(PluginSelection(plugins=["slime_grpo"], autoload=False),
            data={"train": {"num_ranks": 1}, "algorithm": algorithm})  # one rank: fine
    resolve(PluginSelection(plugins=["slime_grpo"], autoload=False),
            data={"train": {"num_ranks": 2}, "algorithm": {"advantage_estimator": "grpo"}})
