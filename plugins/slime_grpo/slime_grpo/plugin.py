"""Entry point of the ``slime_grpo`` plugin: registration glue from config to ``slime_grpo.ops``.

Every record is registered next to its factory (``@records.register``); every factory is a
builder, ``factory(config) -> the callable the core calls`` (see ``slime_hookspecs.records``).
Kept light: torch and the ops are imported inside the built callables, so ``core plugins``
never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slime_hookspecs import (
    AdvantageEstimatorRecord,
    Config,
    ConfigSection,
    ISCorrectionRecord,
    KLEstimatorRecord,
    LossReducerRecord,
    PolicyLossRecord,
    Records,
    hookimpl,
)

from slime_grpo.config import algorithm

records = Records()

# -- advantages ------------------------------------------------------------------------------

Estimate = Callable[[Any], tuple[list[Any], list[Any]]]


def _all_sum(config: Config) -> Any:
    """Under data parallelism, sums over the trainer ranks, so batch-wide whitening uses the
    whole batch's statistics (each rank holds only its share of groups); None on one rank.
    Over the trainer's data-parallel group: ranks that hold the same samples (tensor-parallel
    peers) must not count them twice."""
    from slime_core.api import data_parallel_group, float_all_sum

    return float_all_sum(config.train.num_ranks, group=data_parallel_group())


def _rewards(batch: Any) -> Any:
    import torch

    return torch.tensor(batch.rewards, dtype=torch.float32)


def _whiten(adv: list[Any], masks: list[Any], all_sum: Any) -> list[Any]:
    from slime_grpo import ops

    return list(ops.whiten(list(adv), [m.float() for m in masks], all_sum=all_sum))


def _group_estimate(config: Config, name: str) -> Estimate:
    def estimate(batch: Any) -> tuple[list[Any], list[Any]]:
        from slime_grpo import ops

        kw: dict[str, Any] = {"group_ids": list(batch.group_indices),
                              "singleton": algorithm(config).singleton_advantage}
        if name in ("grpo", "gspo", "cispo"):
            kw["normalize_std"] = algorithm(config).normalize_std
        adv = ops.ADVANTAGE_ESTIMATORS[name](_rewards(batch), batch.response_lengths, **kw)
        if algorithm(config).whiten_advantages:
            adv = _whiten(adv, batch.loss_masks, _all_sum(config))
        return adv, adv

    return estimate


@records.register(AdvantageEstimatorRecord, "grpo",
                  summary="group mean baseline / (group std + 1e-6); singleton groups get 0")
def grpo(config: Config) -> Estimate:
    return _group_estimate(config, "grpo")


@records.register(AdvantageEstimatorRecord, "dr_grpo",
                  summary="group mean baseline, no std division (Dr. GRPO)")
def dr_grpo(config: Config) -> Estimate:
    return _group_estimate(config, "dr_grpo")


@records.register(AdvantageEstimatorRecord, "gspo",
                  summary="GRPO advantages, for the gspo policy loss")
def gspo(config: Config) -> Estimate:
    return _group_estimate(config, "gspo")


@records.register(AdvantageEstimatorRecord, "cispo",
                  summary="GRPO advantages, for the cispo policy loss")
def cispo(config: Config) -> Estimate:
    return _group_estimate(config, "cispo")


@records.register(AdvantageEstimatorRecord, "rloo",
                  summary="leave-one-out baseline r_i - mean_{j != i} r_j")
def rloo(config: Config) -> Estimate:
    return _group_estimate(config, "rloo")


def _reward_kl_fn(config: Config) -> Callable[[Any, Any], Any]:
    """The KL estimator of the reward penalty, built from its record (whichever plugin
    registers it), so its clamps follow the config as the KL loss's do."""
    alg = algorithm(config)
    name = alg.kl_in_reward_estimator or alg.kl_estimator
    if name in _KL_SUMMARIES:  # ours: no plugin manager needed (ops-level callers, tests)
        return _kl_builder(name)(config)
    from slime_core.api import get_registries

    return get_registries().kl_estimator.get(name).factory(config)  # type: ignore[no-any-return]


def _reinforce(config: Config, baseline: bool) -> Estimate:
    def estimate(batch: Any) -> tuple[list[Any], list[Any]]:
        from slime_grpo import ops

        alg = algorithm(config)
        kl = None
        if alg.kl_in_reward_coef > 0 and batch.ref_log_probs is not None:
            lps = batch.old_log_probs or batch.rollout_log_probs
            kl_fn = _reward_kl_fn(config)
            kl = [kl_fn(lp, ref) for lp, ref in zip(lps, batch.ref_log_probs, strict=True)]
        # slime whitens only with --normalize-advantages; verl always whitens REINFORCE++
        kw: dict[str, Any] = {"kl": kl, "kl_coef": alg.kl_in_reward_coef, "gamma": alg.gamma,
                              "all_sum": _all_sum(config),
                              "whiten_advantages": alg.whiten_advantages or alg.whiten_reinforce,
                              "skip_masked": alg.masked_steps == "skip"}
        if baseline:
            kw["group_ids"] = list(batch.group_indices)
            kw["singleton"] = alg.singleton_advantage
            kw["cumulative_kl"] = alg.reinforce_baseline_kl == "cumulative"
            fn: Callable[..., list[Any]] = ops.reinforce_plus_plus_baseline_advantages
        else:
            fn = ops.reinforce_plus_plus_advantages
        adv = fn(_rewards(batch), batch.loss_masks, **kw)
        return adv, adv

    return estimate


@records.register(AdvantageEstimatorRecord, "reinforce_plus_plus",
                  summary="discounted returns with KL in the reward, whitened over the batch")
def reinforce_plus_plus(config: Config) -> Estimate:
    return _reinforce(config, baseline=False)


@records.register(AdvantageEstimatorRecord, "reinforce_plus_plus_baseline",
                  summary="group-mean baseline, KL in the reward, whitened")
def reinforce_plus_plus_baseline(config: Config) -> Estimate:
    return _reinforce(config, baseline=True)


slime_register_advantage_estimators = records.hook(AdvantageEstimatorRecord)


# -- policy losses ---------------------------------------------------------------------------

PolicyLoss = Callable[[Any, list[Any]], tuple[list[Any], dict[str, float]]]


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {f"train/{k}": float(v) for k, v in metrics.items()}


def _policy_loss(config: Config, name: str) -> PolicyLoss:
    def loss(batch: Any, log_probs: list[Any]) -> tuple[list[Any], dict[str, float]]:
        from slime_grpo import ops

        alg = algorithm(config)
        high = alg.eps_clip_high or None
        dual = alg.eps_clip_c or None
        clamp = alg.log_ratio_clamp or None
        if name == "cispo":
            pg, m = ops.cispo_loss(log_probs, batch.old_log_probs, batch.advantages,
                                   batch.loss_masks, eps_clip_high=high or alg.eps_clip,
                                   eps_clip=alg.eps_clip, log_ratio_clamp=clamp)
        elif name == "ppo":
            pg, m = ops.ppo_clip_loss(log_probs, batch.old_log_probs, batch.advantages,
                                      batch.loss_masks, eps_clip=alg.eps_clip,
                                      eps_clip_high=high, eps_clip_c=dual, log_ratio_clamp=clamp)
        else:  # gspo: its sequence ratio has no log-ratio clamp here (verl caps it at 10)
            fn = ops.POLICY_LOSSES[name]
            pg, m = fn(log_probs, batch.old_log_probs, batch.advantages, batch.loss_masks,
                       eps_clip=alg.eps_clip, eps_clip_high=high, eps_clip_c=dual)
        metrics = _floats(m)
        if alg.opsm_delta > 0:
            keep, mm = ops.opsm_mask(log_probs, batch.old_log_probs, batch.advantages,
                                     batch.loss_masks, opsm_delta=alg.opsm_delta)
            pg = [p * k for p, k in zip(pg, keep, strict=True)]
            metrics.update(_floats(mm))
        return pg, metrics

    return loss


@records.register(PolicyLossRecord, "ppo",
                  summary="clipped surrogate: eps_clip, eps_clip_high, dual clip eps_clip_c")
def ppo_loss(config: Config) -> PolicyLoss:
    return _policy_loss(config, "ppo")


@records.register(PolicyLossRecord, "gspo", summary="clip on the sequence-level ratio (GSPO)")
def gspo_loss(config: Config) -> PolicyLoss:
    return _policy_loss(config, "gspo")


@records.register(PolicyLossRecord, "cispo",
                  summary="clipped stop-gradient IS weight times log-prob (CISPO)")
def cispo_loss(config: Config) -> PolicyLoss:
    return _policy_loss(config, "cispo")


slime_register_policy_losses = records.hook(PolicyLossRecord)


# -- KL, IS corrections, reducers ------------------------------------------------------------


def _kl_builder(name: str) -> Callable[[Any], Callable[[Any, Any], Any]]:
    def build(config: Config) -> Callable[[Any, Any], Any]:
        alg = algorithm(config)
        if name in ("k3", "low_var_kl"):
            # slime clamps only the name low_var_kl, verl both and the log-ratio before exp
            clamp = (alg.k3_clamp if name == "k3" else alg.low_var_kl_clamp) or None
            ratio_clamp = alg.kl_log_ratio_clamp or None

            def k3(log_probs: Any, ref_log_probs: Any) -> Any:
                from slime_grpo import ops

                return ops.kl_k3(log_probs, ref_log_probs, clamp=clamp,
                                 log_ratio_clamp=ratio_clamp)

            return k3

        def kl(log_probs: Any, ref_log_probs: Any) -> Any:
            from slime_grpo import ops

            return ops.KL_ESTIMATORS[name](log_probs, ref_log_probs)

        return kl

    return build


# the four estimators share one body (ops.KL_ESTIMATORS), so they are registered in a loop
_KL_SUMMARIES = {"k1": "log(pi/pi_ref)", "k2": "k1^2 / 2",
                 "k3": "exp(-k1) - 1 + k1, clamped by algorithm.k3_clamp",
                 "low_var_kl": "k3 clamped by algorithm.low_var_kl_clamp"}
for _name, _summary in _KL_SUMMARIES.items():
    records.add(KLEstimatorRecord(name=_name, factory=_kl_builder(_name), summary=_summary))

slime_register_kl_estimators = records.hook(KLEstimatorRecord)


def _is_builder(name: str) -> Callable[[Any], Callable[..., Any]]:
    def build(config: Config) -> Callable[..., Any]:
        def correct(pg: list[Any], train_lp: list[Any], rollout_lp: list[Any],
                    masks: list[Any]) -> Any:
            from slime_grpo import ops

            out_pg, out_masks, m = ops.IS_CORRECTIONS[name](
                dict(algorithm(config).is_kwargs), pg, train_lp, rollout_lp, masks)
            return list(out_pg), list(out_masks), {k: float(v) for k, v in m.items()}

        return correct

    return build


for _name, _summary in {
    "tis": "token-level truncated IS: min(exp(old - rollout), tis_clip)",
    "seq_tis": "sequence-level truncated IS",
    "icepop": "mask tokens whose ratio is outside [tis_clip_low, tis_clip]",
    "seq_mask_tis": "mask whole sequences outside the bounds, TIS on the rest",
}.items():
    records.add(ISCorrectionRecord(name=_name, factory=_is_builder(_name), summary=_summary))

slime_register_is_corrections = records.hook(ISCorrectionRecord)


def _reducer_builder(name: str) -> Callable[..., Any]:
    def build(config: Config, response_lengths: list[int], loss_masks: list[Any]) -> Any:
        from slime_grpo import ops

        max_len = algorithm(config).max_response_length or config.rollout.max_new_tokens
        return ops.get_reducer(name, response_lengths, loss_masks, max_response_length=max_len,
                               count_empty_samples=algorithm(config).count_empty_samples)

    return build


# the loss reducers of every algorithm: slime_ppo's critic reduces its value loss with these
for _name, _summary in {
    "token_mean": "sum over masked tokens / number of masked tokens",
    "seq_mean_token_mean": "per-sample token mean, then mean over samples (slime default)",
    "seq_mean_token_sum": "per-sample token sum, then mean over samples",
    "seq_mean_token_sum_norm": "per-sample sum / max_response_length (Dr. GRPO)",
}.items():
    records.add(LossReducerRecord(
        name=_name, factory=_reducer_builder(_name), summary=_summary,
        extra={"weighting": "tokens" if _name == "token_mean" else "samples"}))

slime_register_loss_reducers = records.hook(LossReducerRecord)


# -- configuration -----------------------------------------------------------------------------


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    """The GRPO family's hyper-parameters, added to the core's ``[algorithm]`` section."""
    from slime_grpo.config import algorithm_keys

    return algorithm_keys()
