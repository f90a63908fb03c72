"""Entry point of the ``slime_grpo`` plugin: registration glue from config to ``slime_grpo.ops``.

Kept light: torch and the ops are imported inside the record factories, so ``core plugins``
never imports torch.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import (
    AdvantageEstimatorRecord,
    ISCorrectionRecord,
    KLEstimatorRecord,
    LossReducerRecord,
    PolicyLossRecord,
    hookimpl,
)

# -- advantages ------------------------------------------------------------------------------


def _all_sum(config: Any) -> Any:
    """Under data parallelism, sums over the trainer ranks, so batch-wide whitening uses the
    whole batch's statistics (each rank holds only its share of groups); None on one rank."""
    from slime_core.api import float_all_sum

    return float_all_sum(config.train.num_ranks)


def _rewards(batch: Any) -> Any:
    import torch

    return torch.tensor(batch.rewards, dtype=torch.float32)


def _group_estimator(name: str) -> Any:
    def estimate(config: Any, batch: Any) -> tuple[list[Any], list[Any]]:
        from slime_grpo import ops

        kw: dict[str, Any] = {"group_ids": list(batch.group_indices)}
        if name in ("grpo", "gspo", "cispo"):
            kw["normalize_std"] = config.algorithm.normalize_std
        adv = ops.ADVANTAGE_ESTIMATORS[name](_rewards(batch), batch.response_lengths, **kw)
        if config.algorithm.whiten_advantages:
            adv = _whiten(adv, batch.loss_masks, _all_sum(config))
        return adv, adv

    return estimate


def _reinforce(baseline: bool) -> Any:
    def estimate(config: Any, batch: Any) -> tuple[list[Any], list[Any]]:
        from slime_grpo import ops

        alg = config.algorithm
        kl = None
        if alg.kl_in_reward_coef > 0 and batch.ref_log_probs is not None:
            lps = batch.old_log_probs or batch.rollout_log_probs
            kl = ops.compute_approx_kl_per_sample(lps, batch.ref_log_probs, alg.kl_estimator)
        kw: dict[str, Any] = {"kl": kl, "kl_coef": alg.kl_in_reward_coef, "gamma": alg.gamma,
                              "all_sum": _all_sum(config)}
        if baseline:
            kw["group_ids"] = list(batch.group_indices)
            fn = ops.reinforce_plus_plus_baseline_advantages
        else:
            fn = ops.reinforce_plus_plus_advantages
        adv = fn(_rewards(batch), batch.loss_masks, **kw)
        return adv, adv

    return estimate


def _whiten(adv: list[Any], masks: list[Any], all_sum: Any) -> list[Any]:
    from slime_grpo import ops

    return list(ops.whiten(list(adv), [m.float() for m in masks], all_sum=all_sum))


@hookimpl
def slime_register_advantage_estimators() -> list[AdvantageEstimatorRecord]:
    doc = {
        "grpo": "group mean baseline / (group std + 1e-6); singleton groups get 0",
        "dr_grpo": "group mean baseline, no std division (Dr. GRPO)",
        "gspo": "GRPO advantages, for the gspo policy loss",
        "cispo": "GRPO advantages, for the cispo policy loss",
        "rloo": "leave-one-out baseline r_i - mean_{j != i} r_j",
    }
    recs = [AdvantageEstimatorRecord(name=n, factory=_group_estimator(n), summary=s)
            for n, s in doc.items()]
    recs += [
        AdvantageEstimatorRecord(
            name="reinforce_plus_plus", factory=_reinforce(False),
            summary="discounted returns with KL in the reward, whitened over the batch"),
        AdvantageEstimatorRecord(
            name="reinforce_plus_plus_baseline", factory=_reinforce(True),
            summary="group-mean baseline, KL in the reward, whitened"),
    ]
    return recs


# -- policy losses ---------------------------------------------------------------------------


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {f"train/{k}": float(v) for k, v in metrics.items()}


def _policy_loss(name: str) -> Any:
    def loss(config: Any, batch: Any, log_probs: list[Any]) -> tuple[list[Any], dict[str, float]]:
        from slime_grpo import ops

        alg = config.algorithm
        high = alg.eps_clip_high or None
        dual = alg.eps_clip_c or None
        if name == "cispo":
            pg, m = ops.cispo_loss(log_probs, batch.old_log_probs, batch.advantages,
                                   batch.loss_masks, eps_clip_high=high or alg.eps_clip,
                                   eps_clip=alg.eps_clip)
        else:
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


@hookimpl
def slime_register_policy_losses() -> list[PolicyLossRecord]:
    return [
        PolicyLossRecord(name="ppo", factory=_policy_loss("ppo"),
                         summary="clipped surrogate: eps_clip, eps_clip_high, dual clip eps_clip_c"),
        PolicyLossRecord(name="gspo", factory=_policy_loss("gspo"),
                         summary="clip on the sequence-level ratio (GSPO)"),
        PolicyLossRecord(name="cispo", factory=_policy_loss("cispo"),
                         summary="clipped stop-gradient IS weight times log-prob (CISPO)"),
    ]


# -- KL, IS corrections, reducers ------------------------------------------------------------


def _kl(name: str) -> Any:
    def kl(log_probs: Any, ref_log_probs: Any) -> Any:
        from slime_grpo import ops

        return ops.KL_ESTIMATORS[name](log_probs, ref_log_probs)

    return kl


@hookimpl
def slime_register_kl_estimators() -> list[KLEstimatorRecord]:
    doc = {"k1": "log(pi/pi_ref)", "k2": "k1^2 / 2",
           "k3": "exp(-k1) - 1 + k1, clamped to [-10, 10]", "low_var_kl": "alias of k3"}
    return [KLEstimatorRecord(name=n, factory=_kl(n), summary=s) for n, s in doc.items()]


def _is(name: str) -> Any:
    def correct(config: Any, pg: list[Any], train_lp: list[Any], rollout_lp: list[Any],
                masks: list[Any]) -> Any:
        from slime_grpo import ops

        out_pg, out_masks, m = ops.IS_CORRECTIONS[name](
            dict(config.algorithm.is_kwargs), pg, train_lp, rollout_lp, masks)
        return list(out_pg), list(out_masks), {k: float(v) for k, v in m.items()}

    return correct


@hookimpl
def slime_register_is_corrections() -> list[ISCorrectionRecord]:
    doc = {
        "tis": "token-level truncated IS: min(exp(old - rollout), tis_clip)",
        "seq_tis": "sequence-level truncated IS",
        "icepop": "mask tokens whose ratio is outside [tis_clip_low, tis_clip]",
        "seq_mask_tis": "mask whole sequences outside the bounds, TIS on the rest",
    }
    return [ISCorrectionRecord(name=n, factory=_is(n), summary=s) for n, s in doc.items()]


def _reducer(name: str) -> Any:
    def make(config: Any, response_lengths: list[int], loss_masks: list[Any]) -> Any:
        from slime_grpo import ops

        max_len = config.algorithm.max_response_length or config.rollout.max_new_tokens
        return ops.get_reducer(name, response_lengths, loss_masks, max_response_length=max_len)

    return make


@hookimpl
def slime_register_loss_reducers() -> list[LossReducerRecord]:
    doc = {
        "token_mean": "sum over masked tokens / number of masked tokens",
        "seq_mean_token_mean": "per-sample token mean, then mean over samples (slime default)",
        "seq_mean_token_sum": "per-sample token sum, then mean over samples",
        "seq_mean_token_sum_norm": "per-sample sum / max_response_length (Dr. GRPO)",
    }
    return [
        LossReducerRecord(name=n, factory=_reducer(n), summary=s,
                          extra={"weighting": "tokens" if n == "token_mean" else "samples"})
        for n, s in doc.items()
    ]
