"""The slime_grpo plugin: every record is registered and callable on a small batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.testing import build_test_config
from slime_grpo.config import algorithm_keys
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
    pm = _manager().pluggy
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
    cfg = build_test_config(algorithm_keys(), algorithm={"kl_in_reward_coef": 0.1, "is_kwargs": {"tis_clip": 2.0}})
    reg = m.registries
    for rec in reg.advantage_estimator:
        adv, ret = rec.factory(cfg)(_batch())
        assert [a.numel() for a in adv] == [3, 2, 4, 1], rec.name
        assert all(torch.isfinite(a).all() for a in adv), rec.name
    batch = _batch()
    batch.advantages, _ = reg.advantage_estimator.get("grpo").factory(cfg)(batch)
    # GRPO by hand: group 0 rewards [1, 0]: mean 0.5, std (unbiased) 0.7071 -> +-0.7071
    assert torch.allclose(batch.advantages[0], torch.full((3,), 0.5 / (2 ** 0.5 / 2 + 1e-6)))
    # group 1 rewards [1, 1]: zero std -> advantage 0
    assert torch.equal(batch.advantages[2], torch.zeros(4))
    log_probs = [x.clone().requires_grad_(True) for x in batch.old_log_probs]
    for rec in reg.policy_loss:
        pg, metrics = rec.factory(cfg)(batch, log_probs)
        assert [p.numel() for p in pg] == [3, 2, 4, 1], rec.name
        assert all(torch.isfinite(p).all() for p in pg), rec.name
        assert "train/pg_clipfrac" in metrics, (rec.name, sorted(metrics))
    for rec in reg.kl_estimator:
        kl = rec.factory(cfg)(batch.old_log_probs[0], batch.ref_log_probs[0])
        assert kl.shape == (3,)
    for rec in reg.is_correction:
        pg, masks, metrics = rec.factory(cfg)([torch.ones(n) for n in batch.response_lengths],
                                              batch.old_log_probs, batch.rollout_log_probs,
                                              batch.loss_masks)
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


# REINFORCE++ is whitened only on request under the slime preset (whiten_reinforce: verl's)
WHITENING = {
    "reinforce_plus_plus": {"advantage_estimator": "reinforce_plus_plus", "gamma": 0.9,
                            "whiten_reinforce": True},
    "reinforce_plus_plus_baseline": {"advantage_estimator": "reinforce_plus_plus_baseline",
                                     "whiten_reinforce": True},
    "grpo_whitened": {"advantage_estimator": "grpo", "whiten_advantages": True},
}
# 4 groups of 2 over 3 ranks: shares of 2, 2 and 0 groups (the last rank's share is empty)
SHARES = [[0, 1, 2, 3], [4, 5, 6, 7], []]


def _whitening_batch(idx: list[int]) -> TrainBatch:
    lengths = [3, 5, 2, 4, 6, 1, 3, 2]
    rewards = [1.0, 0.0, 0.5, 0.5, 1.0, 1.0, 0.0, 0.25]
    masks = [torch.tensor([1.0] * (n - 1) + [0.0]) if n > 1 else torch.ones(1) for n in lengths]
    return TrainBatch(
        tokens=[torch.arange(lengths[i] + 2) for i in idx],
        response_lengths=[lengths[i] for i in idx], loss_masks=[masks[i] for i in idx],
        rewards=[rewards[i] for i in idx], raw_rewards=[rewards[i] for i in idx],
        group_indices=[i // 2 for i in idx],
    )


def _estimate(algorithm: dict, num_ranks: int, idx: list[int]) -> list:
    from slime_core.context import set_manager
    from slime_core.session import resolve

    manager, config = resolve(PluginSelection(plugins=["slime_grpo"], autoload=False),
                              data={"train": {"num_ranks": num_ranks}, "algorithm": algorithm})
    set_manager(manager)
    rec = manager.registries.advantage_estimator.get(algorithm["advantage_estimator"])
    adv, _ = rec.factory(config)(_whitening_batch(idx))
    return [a.tolist() for a in adv]


def _rank(rank: int, world: int, init: str, algorithm: dict, out: str) -> None:
    import json

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        adv = _estimate(algorithm, world, SHARES[rank])
    finally:
        dist.destroy_process_group()
    Path(f"{out}.{rank}").write_text(json.dumps(adv))


@pytest.mark.parametrize("name", sorted(WHITENING))
def test_batch_wide_whitening_across_data_parallel_ranks_equals_one_process(name, tmp_path):
    """Three gloo ranks (one with an empty share) whiten with the whole batch's statistics:
    each rank's advantages equal the single-process ones for its samples."""
    import json

    import torch.multiprocessing as mp

    algorithm = WHITENING[name]
    whole = _estimate(algorithm, 1, list(range(8)))
    out = str(tmp_path / "adv")
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(_rank, args=(3, init, algorithm, out), nprocs=3, join=True,
                       start_method="spawn")
    for rank, idx in enumerate(SHARES):
        got = json.loads(Path(f"{out}.{rank}").read_text())
        assert len(got) == len(idx)
        for i, adv in zip(idx, got, strict=True):
            torch.testing.assert_close(torch.tensor(adv), torch.tensor(whole[i]),
                                       rtol=1e-5, atol=1e-6)
    # and per-rank statistics would differ: the test can tell the two apart
    alone = _estimate(algorithm, 1, SHARES[0])
    assert any(abs(a - b) > 1e-3 for x, y in zip(alone, whole[:4], strict=True) for a, b in zip(x, y, strict=True))

def test_the_algorithm_keys_defaults_are_the_slime_preset_column() -> None:
    import dataclasses

    from slime_grpo.config import DEFAULTS, GRPOAlgorithmKeys

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOAlgorithmKeys)}
    defaults.update(DEFAULTS)
    presets = GRPOAlgorithmKeys.NUMERICS_PRESETS
    assert set(presets) == {"slime", "verl"} and set(presets["slime"]) == set(presets["verl"])
    assert {k: defaults[k] for k in presets["slime"]} == presets["slime"]
    assert set(presets["verl"]) <= set(defaults)  # a typo would be silently ignored
    cfg = build_test_config(algorithm_keys(), algorithm={"numerics": "verl"})
    for key, value in presets["verl"].items():
        assert getattr(cfg.algorithm, key) == value, key
    # every record a default or a preset names is one this plugin registers
    reg = _manager().registries
    for key, kind in (("advantage_estimator", reg.advantage_estimator),
                      ("policy_loss", reg.policy_loss), ("loss_reducer", reg.loss_reducer),
                      ("kl_estimator", reg.kl_estimator)):
        assert DEFAULTS[key] in kind, key
        for column in presets.values():
            assert column.get(key, DEFAULTS[key]) in kind, key


@pytest.mark.parametrize("estimator", ["reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_the_slime_preset_refuses_unwhitened_reinforce_as_slime_does(estimator: str) -> None:
    # issue 38: slime's arguments check refuses these estimators without
    # --normalize-advantages; the slime preset trained on unwhitened returns instead
    with pytest.raises(ValueError, match="require advantage normalization") as refused:
        build_test_config(algorithm_keys(), algorithm={"advantage_estimator": estimator})
    assert f"algorithm.advantage_estimator: {estimator!r}" in str(refused.value)
    assert "algorithm.whiten_advantages = true" in str(refused.value)
    # slime's flag, the verl preset (it whitens them) or whiten_reinforce: accepted
    for extra in ({"whiten_advantages": True}, {"numerics": "verl"}, {"whiten_reinforce": True}):
        cfg = build_test_config(algorithm_keys(),
                                algorithm={"advantage_estimator": estimator, **extra})
        assert cfg.algorithm.advantage_estimator == estimator
