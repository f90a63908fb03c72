"""``algorithm.numerics``: the slime and verl presets reproduce each system's own outputs.

The expected numbers in ``data/numerics_reference.json`` were produced by running the peers'
own functions on the inputs stored beside them (float64, CPU, torch 2.13.0):

* THUDM/slime at 624b824a898ab0ec1fcb4d373004c7f3852bf515: ``slime/utils/ppo_utils.py``
  (``compute_approx_kl``, ``compute_policy_loss``, ``compute_cispo_loss``,
  ``get_reinforce_plus_plus_returns``, ``get_reinforce_plus_plus_baseline_advantages``),
  ``slime/utils/distributed_utils.py`` (``distributed_masked_whiten``, one gloo rank) and
  ``slime/backends/megatron_utils/cp_utils.py`` (``get_sum_of_sample_mean``), run with
  ``megatron.core.mpu`` stubbed to one rank and torch.compile disabled. slime's GRPO group
  normalisation lives in a Ray actor (``slime/ray/rollout.py:_post_process_rewards``): its three
  lines (``mean``, ``std``, ``/ (std + 1e-6)``) were applied per group, not run.
* verl 0.9.1 from PyPI (installed ``--no-deps`` in a throwaway venv): ``core_algos`` and
  ``torch_functional``, run.

Neither package is a dependency here; the recorder script was throwaway (the inputs and outputs
are the record). Every case goes through the records the presets configure (the plugin's
estimators, policy losses, KL estimators and reducers), built from a config that sets only
``algorithm.numerics`` and the case's hyper-parameters.

Tolerance 1e-6: the plugin computes rewards and KL in float32, as slime does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.testing import build_test_config
from slime_grpo.config import algorithm_keys
from slime_hookspecs import TrainBatch

REF = json.loads((Path(__file__).parent / "data" / "numerics_reference.json").read_text())
TOL = {"atol": 1e-6, "rtol": 1e-6}


@pytest.fixture(scope="module")
def registries() -> Any:
    return SlimePluginManager(PluginSelection(plugins=["slime_grpo"])).load().registries


def _t(xs: Any) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def _close(got: Any, want: Any, **tol: float) -> None:
    torch.testing.assert_close(torch.as_tensor(got, dtype=torch.float64), _t(want),
                               **(tol or TOL))


def _batch(lengths: list[int], **kw: Any) -> TrainBatch:
    base: dict[str, Any] = dict(tokens=[torch.arange(n + 1) for n in lengths],
                                response_lengths=lengths,
                                loss_masks=[torch.ones(n) for n in lengths])
    base.update(kw)
    return TrainBatch(**base)


# -- group advantages: unbiased std + 1e-6, singleton groups ---------------------------------


@pytest.mark.parametrize("system", ["slime", "verl"])
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_advantages_with_singletons(registries, system, name) -> None:
    case = REF["group_advantages"]
    if name not in case[system]:
        pytest.skip(f"{system} has no recorded {name}")
    cfg = build_test_config(algorithm_keys(), algorithm={"numerics": system})
    n = len(case["rewards"])
    batch = _batch([1] * n, rewards=case["rewards"], group_indices=case["groups"])
    adv, _ = registries.advantage_estimator.get(name).factory(cfg)(batch)
    _close(torch.cat(adv), case[system][name])


def test_singleton_rule_is_the_only_group_difference() -> None:
    """On groups of two or more the two systems agree (same std estimator and epsilon)."""
    case = REF["group_advantages"]
    multi = [i for i, g in enumerate(case["groups"]) if case["groups"].count(g) > 1]
    for name in ("grpo", "dr_grpo"):
        _close([case["slime"][name][i] for i in multi], [case["verl"][name][i] for i in multi])
    lone = [i for i, g in enumerate(case["groups"]) if case["groups"].count(g) == 1]
    assert all(case["slime"]["grpo"][i] == 0.0 for i in lone)
    # verl: mean 0, std 1 -> r / (1 + 1e-6)
    _close([case["verl"]["grpo"][i] for i in lone],
           [case["rewards"][i] / (1 + 1e-6) for i in lone])


# -- KL estimators: which names clamp, and the log-ratio clamp -------------------------------


@pytest.mark.parametrize("system", ["slime", "verl"])
@pytest.mark.parametrize("name", ["k1", "k2", "k3", "low_var_kl"])
def test_kl_estimators(registries, system, name) -> None:
    case = REF["kl"]
    cfg = build_test_config(algorithm_keys(), algorithm={"numerics": system})
    kl = registries.kl_estimator.get(name).factory(cfg)(_t(case["log_probs"]),
                                                       _t(case["ref_log_probs"]))
    # float32 in every system (slime and verl cast too); values up to 7e10 unclamped in slime
    _close(kl, case[system][name], atol=1e-6, rtol=1e-6)


def test_kl_clamps_by_hand() -> None:
    """k1 = -25 (first input): slime's k3 = e^25 - 26 (no clamp), its low_var_kl 10; verl
    clamps k1 to -20 first and the result to 10."""
    case = REF["kl"]
    assert case["slime"]["k3"][0] == pytest.approx(float(torch.tensor(25.0).exp()) - 26, rel=1e-6)
    assert case["slime"]["low_var_kl"][0] == 10.0 and case["verl"]["k3"][0] == 10.0


# -- PPO clipped loss: log-ratio clamp, dual clip, aggregation -------------------------------


def _policy_batch(case: dict[str, Any]) -> TrainBatch:
    lengths = [len(x) for x in case["log_probs"]]
    return _batch(lengths, loss_masks=[_t(m) for m in case["loss_masks"]],
                  old_log_probs=[_t(x) for x in case["old_log_probs"]],
                  advantages=[_t(x) for x in case["advantages"]], rewards=[0.0] * len(lengths))


def _loss(registries: Any, cfg: Any, name: str, case: dict[str, Any]) -> tuple[Any, Any, dict]:
    batch = _policy_batch(case)
    pg, metrics = registries.policy_loss.get(name).factory(cfg)(
        batch, [_t(x) for x in case["log_probs"]])
    reducer = registries.loss_reducer.get(cfg.algorithm.loss_reducer).factory(
        cfg, batch.response_lengths, batch.loss_masks)
    masks = batch.loss_masks
    return pg, reducer([p * m for p, m in zip(pg, masks, strict=True)]), metrics


def test_ppo_loss_slime(registries) -> None:
    case = REF["policy_loss"]
    cfg = build_test_config(algorithm_keys(), algorithm={"numerics": "slime", "eps_clip": case["eps_clip"],
                                       "eps_clip_high": case["eps_clip_high"]})
    pg, loss, _ = _loss(registries, cfg, "ppo", case)
    # per token: no log-ratio clamp, no dual clip (slime's compute_policy_loss)
    _close(torch.cat(pg), case["slime"]["per_token_loss"])
    # per-sample token mean, then mean over samples (slime's sum_of_sample_mean / N)
    _close(loss, case["slime"]["pg_loss"])


def test_ppo_loss_verl(registries) -> None:
    case = REF["policy_loss"]
    cfg = build_test_config(algorithm_keys(), algorithm={"numerics": "verl", "eps_clip": case["eps_clip"],
                                       "eps_clip_high": case["eps_clip_high"]})
    assert cfg.algorithm.eps_clip_c == 3.0 and cfg.algorithm.loss_reducer == "token_mean"
    _, loss, metrics = _loss(registries, cfg, "ppo", case)
    _close(loss, case["verl"]["pg_loss"])  # dual clip 3.0, token-mean
    # the ppo_kl metric sees the [-20, 20] log-ratio clamp (token 3 of sample 3: -22 -> -20)
    _close(metrics["train/ppo_kl"], case["verl"]["ppo_kl"])
    _close(metrics["train/pg_clipfrac"], case["verl"]["pg_clipfrac"])
    _close(metrics["train/pg_clipfrac_dual"], case["verl"]["pg_clipfrac_lower"])


def test_cispo_slime(registries) -> None:
    case = REF["policy_loss"]
    cfg = build_test_config(algorithm_keys(), algorithm={"numerics": "slime", "eps_clip": case["eps_clip"],
                                       "eps_clip_high": case["eps_clip_high"],
                                       "advantage_estimator": "cispo", "policy_loss": "cispo"})
    pg, _, _ = _loss(registries, cfg, "cispo", case)
    _close(torch.cat(pg), case["slime"]["cispo_per_token_loss"])


# -- loss aggregation: fully masked samples in N or not --------------------------------------


@pytest.mark.parametrize("system", ["slime", "verl"])
def test_aggregation(registries, system) -> None:
    case = REF["aggregation"]
    lengths = [len(x) for x in case["values"]]
    for mode, want in case[system].items():
        cfg = build_test_config(algorithm_keys(), algorithm={"numerics": system,
                                           "max_response_length": case["max_response_length"]})
        reducer = registries.loss_reducer.get(mode).factory(
            cfg, lengths, [_t(m) for m in case["loss_masks"]])
        _close(reducer([_t(x) for x in case["values"]]), want)


# -- REINFORCE++ (masked spans, gamma, KL in the reward) and its baseline ---------------------


def _reinforce_batch(case: dict[str, Any]) -> TrainBatch:
    lengths = [len(m) for m in case["loss_masks"]]
    return _batch(lengths, loss_masks=[_t(m) for m in case["loss_masks"]],
                  rewards=case["rewards"], group_indices=case["groups"],
                  old_log_probs=[_t(x) for x in case["log_probs"]],
                  ref_log_probs=[_t(x) for x in case["ref_log_probs"]])


def _masked(xs: list[Any], masks: list[list[int]]) -> list[float]:
    """Values at loss-masked positions: the only ones a loss sees (the systems differ on what
    they leave at masked positions: slime the carried return, verl and this project 0)."""
    return [float(v) for x, m in zip(xs, masks, strict=True) for v, k in zip(x, m, strict=True) if k]


@pytest.mark.parametrize("whiten", [False, True])
def test_reinforce_plus_plus_slime(registries, whiten) -> None:
    case = REF["reinforce"]
    # unwhitened, the slime preset refuses the estimator as a run's choice (slime's arguments
    # check requires --normalize-advantages); the record still computes slime's returns op,
    # which the whitened path whitens, so the config names it only when it whitens
    cfg = build_test_config(algorithm_keys(), algorithm={
        "numerics": "slime", "kl_in_reward_coef": case["kl_coef"], "gamma": case["gamma"],
        "whiten_advantages": whiten,
        **({"advantage_estimator": "reinforce_plus_plus"} if whiten else {})})
    adv, _ = registries.advantage_estimator.get("reinforce_plus_plus").factory(cfg)(
        _reinforce_batch(case))
    masks = case["loss_masks"]
    if not whiten:  # slime's get_reinforce_plus_plus_returns: every position a discount step
        _close(_masked(adv, masks), _masked(case["slime"]["reinforce_plus_plus"], masks))
    else:  # --normalize-advantages: distributed_masked_whiten over the loss-masked tokens
        flat = [v for x in case["slime"]["reinforce_plus_plus"] for v in x]
        lengths = [len(m) for m in masks]
        parts, i = [], 0
        for n in lengths:
            parts.append(case["slime"]["reinforce_plus_plus_whitened"][i:i + n])
            i += n
        assert len(flat) == i
        _close(_masked(adv, masks), _masked(parts, masks))


def test_reinforce_plus_plus_verl(registries) -> None:
    case = REF["reinforce"]
    cfg = build_test_config(algorithm_keys(), algorithm={
        "numerics": "verl", "advantage_estimator": "reinforce_plus_plus",
        "kl_in_reward_coef": case["kl_coef"], "gamma": case["gamma"]})
    assert cfg.algorithm.kl_in_reward_estimator == "k1" and cfg.algorithm.whiten_reinforce
    adv, _ = registries.advantage_estimator.get("reinforce_plus_plus").factory(cfg)(
        _reinforce_batch(case))
    # verl: masked tokens skipped (carried through), KL on model tokens, whitened, 0 at masked
    _close(torch.cat(adv), [v for x in case["verl"]["reinforce_plus_plus"] for v in x])


def test_masked_spans_make_the_two_systems_differ() -> None:
    """The recorded REINFORCE++ returns differ at gamma < 1 only through the masked spans: the
    sample without one (sample 3) has the same unwhitened returns in both systems."""
    case = REF["reinforce"]
    _close(case["slime"]["reinforce_plus_plus"][2], case["verl"]["reinforce_plus_plus_returns"][2])
    with pytest.raises(AssertionError):
        _close(case["slime"]["reinforce_plus_plus"][0],
               case["verl"]["reinforce_plus_plus_returns"][0])


def test_reinforce_plus_plus_baseline_slime(registries) -> None:
    case = REF["reinforce"]
    # slime's op before its (required) whitening: the record of an estimator a slime-preset
    # config may only name with whitening on (see test_reinforce_plus_plus_slime)
    cfg = build_test_config(algorithm_keys(), algorithm={
        "numerics": "slime", "kl_in_reward_coef": case["kl_coef"]})
    adv, _ = registries.advantage_estimator.get("reinforce_plus_plus_baseline").factory(cfg)(
        _reinforce_batch(case))
    masks = case["loss_masks"]
    # A_t = (r - mean_g) - coef * kl_t, no whitening; singleton groups 0 - coef * kl_t
    _close(_masked(adv, masks), _masked(case["slime"]["reinforce_plus_plus_baseline"], masks))


def test_reinforce_plus_plus_baseline_verl_without_kl(registries) -> None:
    """verl's baseline estimator sums a reward-side KL into the scalar score before the
    baseline, a form not offered here; without a KL term the preset matches it (singleton
    groups keep their reward, then batch whitening)."""
    case = REF["reinforce"]
    cfg = build_test_config(algorithm_keys(), algorithm={
        "numerics": "verl", "advantage_estimator": "reinforce_plus_plus_baseline"})
    adv, _ = registries.advantage_estimator.get("reinforce_plus_plus_baseline").factory(cfg)(
        _reinforce_batch(case))
    _close(torch.cat(adv), [v for x in case["verl"]["reinforce_plus_plus_baseline_no_kl"]
                            for v in x])


# -- whitening --------------------------------------------------------------------------------


@pytest.mark.parametrize("system", ["slime", "verl"])
def test_whitening_matches_both(system) -> None:
    """Both whiten with Bessel's variance and 1e-8 on the variance: one function serves both."""
    from slime_grpo import ops

    case = REF["whiten"]
    _close(ops.whiten(_t(case["values"]), _t(case["mask"])), case[system])
