"""Turn registry records (and hook answers) into advantages and a micro-batch loss.

Every trainer backend calls :func:`compute_advantages` once per step and :func:`compute_loss`
per micro-batch, so the per-call hooks fire identically whatever the backend. With ``[opd]``
enabled, :func:`compute_advantages` also adds the on-policy distillation term
(:mod:`slime_core.algo.opd`); the backend must have set ``batch.old_log_probs`` and, in
trainer mode, ``batch.teacher_log_probs`` before calling it.

The records named by ``[algorithm]`` are the way to supply an estimator, a policy loss, a
mismatch correction and a reducer; ``slime_compute_advantages``, ``slime_is_correction`` and
``slime_pg_loss_reducer`` are deprecated aliases, still asked first and reported once
(:mod:`slime_core.pluginmgr.deprecation`). ``slime_loss`` replaces the whole micro-batch loss.

Loss composition (when no ``slime_loss`` implementation answers):

* ``train.loss = "sft"``: ``reducer(-log_probs)`` over loss-masked tokens;
* ``train.loss = "policy"``: per-token policy loss from ``algorithm.policy_loss``, corrected
  for the rollout/train mismatch (``algorithm.is_correction``; the deprecated
  ``slime_is_correction`` first),
  reduced by the reducer; plus ``kl_loss_coef * reducer(kl)`` when ``use_kl_loss`` and minus
  ``entropy_coef * reducer(entropy)``.

Mismatch metrics (``train/mismatch_abs_logprob_diff``) are always logged when rollout
log-probs exist, so the rollout/train gap is visible even with no correction configured.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from slime_hookspecs import TrainBatch

from slime_core.algo.opd import apply_opd, opd_enabled, teacher_in_trainer, zero_task_rewards
from slime_core.context import get_manager
from slime_core.observe.trace import sub_phase
from slime_core.trainkit.flat import flat_cat, packed_source, samples_as, split_samples
from slime_core.pluginmgr.deprecation import warn_deprecated_impls

Reducer = Callable[[list[torch.Tensor]], torch.Tensor]


def needs_ref(config: Any) -> bool:
    """Whether the frozen reference model's log-probs are needed this run."""
    if config.train.loss == "sft":
        return False
    alg = config.algorithm
    if alg.use_kl_loss or alg.kl_in_reward_coef > 0:
        return True
    # .get raises on an unknown name: a typo must not silently skip the reference log-probs
    rec = get_manager().registries.advantage_estimator.get(alg.advantage_estimator,
                                                            require_available=False)
    return bool(rec.needs_ref)


def compute_advantages(config: Any, batch: TrainBatch) -> None:
    """Set ``batch.advantages`` (and ``batch.returns``) from the hook or the estimator."""
    if config.train.loss == "sft":
        return
    zero_task_rewards(config, batch)
    sub_phase("advantages")  # the trace's training sub-phase, until the first train step
    manager = get_manager()
    warn_deprecated_impls(manager.hook.slime_compute_advantages)  # the estimator's alias
    adv = manager.hook.slime_compute_advantages(config=config, batch=batch)
    if adv is None:
        estimator = manager.registries.advantage_estimator.built(
            config.algorithm.advantage_estimator, config)
        adv, returns = estimator(batch)
        batch.returns = returns
    if len(adv) != len(batch):
        raise ValueError(
            f"advantages for {len(adv)} samples, batch has {len(batch)} (slime_compute_advantages "
            "or the estimator returned the wrong number)"
        )
    batch.advantages = list(adv)
    if batch.returns is None:
        batch.returns = list(adv)
    apply_opd(config, batch)  # on-policy distillation, after any estimator (algo/opd.py)


def prepare_batch(config: Any, batch: TrainBatch,
                  compute_log_probs: Callable[[TrainBatch, str], list[torch.Tensor]]) -> None:
    """What every trainer backend does to a step's batch before its optimizer steps.

    Turns tokens, loss masks and rollout log-probs into tensors; computes, through the
    backend's ``compute_log_probs(batch, role)``, the reference log-probs when
    :func:`needs_ref`, the teacher's when on-policy distillation runs its teacher in the
    trainer, and the pre-update actor log-probs (``old_log_probs``) when a rollout takes
    several optimizer steps or OPD needs them; then :func:`compute_advantages`. Log-probs
    already on the batch are kept. SFT computes none of them.
    """
    from slime_core.trainkit.batching import to_tensor_list

    batch.tokens = to_tensor_list(batch.tokens, torch.long)
    batch.loss_masks = to_tensor_list(batch.loss_masks, torch.float32)
    if batch.rollout_log_probs is not None:
        batch.rollout_log_probs = to_tensor_list(batch.rollout_log_probs, torch.float32)
    if config.train.loss != "sft":
        if needs_ref(config) and batch.ref_log_probs is None:
            batch.ref_log_probs = compute_log_probs(batch, "ref")
        if teacher_in_trainer(config) and batch.teacher_log_probs is None:
            batch.teacher_log_probs = compute_log_probs(batch, "teacher")
        # the policy that generated the samples, kept by the trainer (train.keep_old_actor)
        if config.train.keep_old_actor and batch.old_log_probs is None:
            batch.old_log_probs = compute_log_probs(batch, "old_actor")
        # OPD needs the student's log-probs before the update, as several steps do
        if (config.train.num_steps_per_rollout > 1 or opd_enabled(config)) \
                and batch.old_log_probs is None:
            batch.old_log_probs = compute_log_probs(batch, "actor")
    compute_advantages(config, batch)


def make_reducer(config: Any, batch: TrainBatch) -> tuple[Reducer, str]:
    """The micro-batch reducer and how micro-batches are weighted (``samples``/``tokens``)."""
    manager = get_manager()
    warn_deprecated_impls(manager.hook.slime_pg_loss_reducer)  # the loss reducer's alias
    red = manager.hook.slime_pg_loss_reducer(
        config=config, response_lengths=batch.response_lengths, loss_masks=batch.loss_masks
    )
    if red is not None:
        return red, "samples"
    reg = manager.registries.loss_reducer
    name = config.algorithm.loss_reducer
    # once per batch, not per micro-batch: the reducer is made for the batch's lengths
    return (reg.built(name, config, batch.response_lengths, batch.loss_masks, key=batch),
            reg.get(name).extra.get("weighting", "samples"))


def compute_loss(
    config: Any, batch: TrainBatch, log_probs: list[torch.Tensor],
    entropy: list[torch.Tensor] | None,
) -> tuple[torch.Tensor, dict[str, float], str]:
    """Loss of one micro-batch, its metrics and its weighting mode."""
    manager = get_manager()
    reducer, weighting = make_reducer(config, batch)
    custom = manager.hook.slime_loss(config=config, batch=batch, log_probs=log_probs, reducer=reducer)
    if custom is not None:
        loss, custom_metrics = custom
        return loss, dict(custom_metrics), weighting
    metrics: dict[str, float] = {}
    dtype = log_probs[0].dtype if log_probs else torch.float32
    masks = samples_as(batch.loss_masks, dtype)
    if config.train.loss == "sft":
        loss = reducer([-lp for lp in log_probs])
        metrics["train/sft_nll"] = float(loss.detach())
    else:
        policy_loss = manager.registries.policy_loss.built(config.algorithm.policy_loss, config)
        pg, m = policy_loss(batch, log_probs)
        metrics.update(m)
        if batch.rollout_log_probs is not None and batch.old_log_probs is not None:
            pg, masks, m = _is_correction(config, pg, batch, masks)
            metrics.update(m)
        pg_loss = reducer(_masked(pg, masks))
        metrics["train/pg_loss"] = float(pg_loss.detach())
        loss = pg_loss
        if config.algorithm.use_kl_loss and batch.ref_log_probs is not None:
            kl_fn = manager.registries.kl_estimator.built(config.algorithm.kl_estimator, config)
            kl = [kl_fn(lp, ref) for lp, ref in zip(log_probs, batch.ref_log_probs)]
            kl_loss = reducer(_masked(kl, masks))
            metrics["train/kl_loss"] = float(kl_loss.detach())
            loss = loss + config.algorithm.kl_loss_coef * kl_loss
    if entropy is not None:
        ent = reducer(_masked(entropy, masks))
        metrics["train/entropy"] = float(ent.detach())
        if config.algorithm.entropy_coef and config.train.loss != "sft":
            loss = loss - config.algorithm.entropy_coef * ent
    metrics["train/loss"] = float(loss.detach())
    return loss, metrics, weighting


def _is_correction(
    config: Any, pg: list[torch.Tensor], batch: TrainBatch, masks: list[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor], dict[str, float]]:
    manager = get_manager()
    rollout = batch.rollout_log_probs
    old = batch.old_log_probs
    assert rollout is not None and old is not None  # the caller checks both
    metrics = {"train/mismatch_abs_logprob_diff": _masked_abs_diff(old, rollout, masks)}
    warn_deprecated_impls(manager.hook.slime_is_correction)  # the IS correction's alias
    out = manager.hook.slime_is_correction(
        config=config, pg_loss=pg, train_log_probs=old, rollout_log_probs=rollout,
        loss_masks=masks,
    )
    if out is None and config.algorithm.is_correction:
        correct = manager.registries.is_correction.built(config.algorithm.is_correction, config)
        out = correct(pg, old, rollout, masks)
    if out is not None:
        pg, masks, m = out
        metrics.update({k if "/" in k else f"train/{k}": float(v) for k, v in m.items()})
    return pg, masks, metrics


def _packed(values: list[torch.Tensor]) -> torch.Tensor | None:
    """Per-sample tensors as one flat tensor, or None where they cannot be concatenated as
    they are (empty, on several devices, or of several dtypes)."""
    if not values:
        return None
    if (packed := packed_source(values)) is not None:
        return packed
    first = values[0]
    if any(v.device != first.device or v.dtype != first.dtype for v in values):
        return None
    return flat_cat(values)


def _masked(values: list[torch.Tensor], masks: list[torch.Tensor]) -> list[torch.Tensor]:
    """``[v * m for v, m in zip(values, masks)]`` as one product over the packed batch (a
    product per sample is an operator, and a backward node, per sample)."""
    flat, flat_masks = _packed(values), _packed(masks)
    if (flat is None or flat_masks is None or flat.device != flat_masks.device
            or any(v.shape != m.shape for v, m in zip(values, masks, strict=True))):
        return [v * m for v, m in zip(values, masks, strict=True)]
    return split_samples(flat * flat_masks, [int(v.numel()) for v in values])


def _masked_abs_diff(a: list[torch.Tensor], b: list[torch.Tensor], masks: list[torch.Tensor]) -> float:
    if not masks:
        return 0.0
    with torch.no_grad():
        x, y, m = _packed(a), _packed(b), _packed(masks)
    if x is None or y is None or m is None or len({x.device, y.device, m.device}) > 1:
        x = torch.stack([((u.detach() - v).abs() * k).sum() for u, v, k in zip(a, b, masks)])
        den = float(torch.stack([k.sum() for k in masks]).sum())
        return float(x.sum()) / den if den > 0 else 0.0
    # two host syncs for the whole micro-batch, not two per sample
    num, den = ((x - y).abs() * m).sum(), float(m.sum())
    return float(num) / den if den > 0 else 0.0
