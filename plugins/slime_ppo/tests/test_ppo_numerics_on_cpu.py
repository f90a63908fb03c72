"""``algorithm.numerics`` for PPO: GAE, returns and the value loss equal slime's and verl's.

``data/numerics_reference.json`` holds the inputs and the outputs of the peers' own code:
THUDM/slime 624b824a898ab0ec1fcb4d373004c7f3852bf515 (``get_advantages_and_returns_batch``
with ``chunked_gae``, ``compute_approx_kl``, ``get_sum_of_sample_mean``; megatron.core.mpu
stubbed to one rank; the token rewards built as ``compute_advantages_and_returns`` builds them
for ``ppo``: KL on every token, the reward at index -1; ``value_loss_function``'s formula
applied, not run, since it needs a model's logits) and verl 0.9.1 from PyPI
(``compute_gae_advantage_return``, ``kl_penalty``, ``compute_value_loss``, run; its rewards
placed as its reward managers and ``apply_kl_penalty`` place them). Float64 inputs; the
project computes KL and GAE in float32, hence 1e-6.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from slime_hookspecs import TrainBatch
from slime_ppo import ops
from slime_ppo.estimator import gae_estimate

REF = json.loads((Path(__file__).parent / "data" / "numerics_reference.json").read_text())
TOL = {"atol": 1e-6, "rtol": 1e-6}


def _t(xs: Any) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def _close(got: Any, want: Any) -> None:
    torch.testing.assert_close(torch.as_tensor(got, dtype=torch.float64), _t(want), **TOL)


def _masked(xs: list[Any], masks: list[list[int]]) -> list[float]:
    return [float(v) for x, m in zip(xs, masks, strict=True) for v, k in zip(x, m, strict=True) if k]


def _gae(make_config: Any, ppo_manager: Any, system: str) -> tuple[Any, Any, Any]:
    case = REF["gae"]
    cfg = make_config(algorithm={"numerics": system, "kl_in_reward_coef": case["kl_coef"],
                                 "gamma": case["gamma"], "lam": case["lam"]})
    lengths = [len(m) for m in case["loss_masks"]]
    batch = TrainBatch(tokens=[torch.arange(n + 1) for n in lengths], response_lengths=lengths,
                       loss_masks=[_t(m) for m in case["loss_masks"]], rewards=case["rewards"],
                       rollout_log_probs=[_t(x) for x in case["log_probs"]],
                       ref_log_probs=[_t(x) for x in case["ref_log_probs"]])
    name = cfg.algorithm.kl_in_reward_estimator or cfg.algorithm.kl_estimator
    assert name == "k1", name  # both presets put k1 in the reward
    kl_fn = ppo_manager.registries.kl_estimator.get(name).factory(cfg)
    adv, ret, _ = gae_estimate(cfg, batch, [_t(v) for v in case["values"]], kl_fn)
    return cfg, adv, ret


def test_gae_slime(make_config, ppo_manager) -> None:
    """Every position is a GAE step, the KL penalises masked tokens too, the reward sits on the
    last token, no whitening: equal to slime on every position, masked ones included."""
    case = REF["gae"]
    cfg, adv, ret = _gae(make_config, ppo_manager, "slime")
    assert not cfg.ppo.whiten_advantages and not cfg.ppo.kl_in_reward_masked
    _close(torch.cat(adv), [v for x in case["slime"]["advantages"] for v in x])
    _close(torch.cat(ret), [v for x in case["slime"]["returns"] for v in x])


def test_gae_verl(make_config, ppo_manager) -> None:
    """Masked positions skipped, the KL on model tokens only, advantages whitened over them.
    Compared at loss-masked positions: verl leaves the carried advantage on masked ones, this
    project 0 (no loss reads them)."""
    case = REF["gae"]
    _, adv, ret = _gae(make_config, ppo_manager, "verl")
    masks = case["loss_masks"]
    _close(_masked(adv, masks), _masked(case["verl"]["advantages"], masks))
    _close(_masked(ret, masks), _masked(case["verl"]["returns"], masks))


@pytest.mark.parametrize("system", ["slime", "verl"])
def test_value_loss(make_config, ppo_manager, system) -> None:
    """slime: no 0.5, value_clip 0.2, clipfrac |v - v_old| > clip, per-sample means; verl: 0.5,
    cliprange_value 0.5, clipfrac where the clipped error is larger, token mean."""
    case = REF["value_loss"]
    cfg = make_config(algorithm={"numerics": system})
    lengths = [len(m) for m in case["loss_masks"]]
    masks = [_t(m) for m in case["loss_masks"]]
    reducer = ppo_manager.registries.loss_reducer.get(cfg.algorithm.loss_reducer).factory(
        cfg, lengths, masks)
    # the arguments slime_ppo.critic passes
    loss, metrics = ops.value_loss(
        [_t(v) for v in case["values"]], [_t(v) for v in case["old_values"]],
        [_t(v) for v in case["returns"]], masks, value_clip=cfg.ppo.value_clip or None,
        coef=cfg.ppo.value_loss_coef, reducer=reducer, clipfrac_rule=cfg.ppo.value_clipfrac)
    _close(loss, case[system]["value_loss"])
    _close(metrics["value_clipfrac"], case[system]["value_clipfrac"])


@pytest.mark.parametrize("reducer", ["seq_mean_token_mean", "seq_mean_token_sum"])
def test_verl_value_clipfrac_is_a_token_mean_whatever_the_loss_reducer(make_config, ppo_manager,
                                                                       reducer) -> None:
    """verl's compute_value_loss passes loss_agg_mode to the loss only; its clipfrac is a plain
    masked token mean (issue 38: it went through the loss reducer)."""
    case = REF["value_loss"]
    cfg = make_config(algorithm={"numerics": "verl", "loss_reducer": reducer})
    lengths = [len(m) for m in case["loss_masks"]]
    masks = [_t(m) for m in case["loss_masks"]]
    red = ppo_manager.registries.loss_reducer.get(reducer).factory(cfg, lengths, masks)
    _, metrics = ops.value_loss(
        [_t(v) for v in case["values"]], [_t(v) for v in case["old_values"]],
        [_t(v) for v in case["returns"]], masks, value_clip=cfg.ppo.value_clip or None,
        coef=cfg.ppo.value_loss_coef, reducer=red, clipfrac_rule=cfg.ppo.value_clipfrac)
    _close(metrics["value_clipfrac"], case["verl"]["value_clipfrac"])
