"""Samples -> :class:`TrainBatch` (the default of ``slime_convert_samples_to_train_data``).

Conventions: a sample with ``remove_sample`` or status FAILED / ABORTED keeps its place (and,
for FAILED, the mean reward of its group's other samples, so it does not move the group
baseline) but its loss mask is all zeros, so it contributes no gradient.

With ``train.routing_replay = "rollout"`` every sample's ``rollout_routed_experts`` becomes
``TrainBatch.routed_experts`` (a trained sample without one is refused, naming it; a masked
one may lack it and is then routed by the trainer's own router), and the record's mean size
per sample is logged as ``rollout/routing_record_bytes``.
"""

from __future__ import annotations

from typing import Any

from slime_core.algo.opd import TEACHER_KEY
from slime_core.context import get_manager
from slime_core.moe.routing import from_record
from slime_core.rewards.scalar import scalar_reward
from slime_hookspecs import Sample, Status, TrainBatch


def default_rewards(config: Any, samples: list[Sample]) -> list[float]:
    raw = [scalar_reward(config, s) if s.status != Status.FAILED else None for s in samples]
    by_group: dict[int, list[float]] = {}
    for s, r in zip(samples, raw):
        if r is not None:
            by_group.setdefault(s.group_index, []).append(r)
    out = []
    for s, r in zip(samples, raw):
        if r is None:
            vals = by_group.get(s.group_index, [])
            r = sum(vals) / len(vals) if vals else 0.0
        out.append(float(r))
    return out


def samples_to_batch(config: Any, samples: list[Sample]) -> TrainBatch:
    """``slime_convert_samples_to_train_data`` if a plugin answers, else :func:`default_convert`."""
    custom = get_manager().hook.slime_convert_samples_to_train_data(config=config, samples=samples)
    return custom if custom is not None else default_convert(config, samples)


def default_convert(config: Any, samples: list[Sample]) -> TrainBatch:
    """Tokens, masks (removed/failed samples zeroed), rewards via ``slime_reward_post_process``."""
    manager = get_manager()
    post = manager.hook.slime_reward_post_process(config=config, samples=samples)
    if post is not None:
        raw, shaped = post
    else:
        raw = default_rewards(config, samples)
        shaped = list(raw)
    if len(raw) != len(samples) or len(shaped) != len(samples):
        raise ValueError("slime_reward_post_process must return one raw and one shaped reward per sample")
    import torch

    batch = TrainBatch()
    has_lp = all(len(s.rollout_log_probs) == s.response_length for s in samples)
    batch.rollout_log_probs = [] if has_lp else None
    for s in samples:
        masked = s.remove_sample or s.status in (Status.FAILED, Status.ABORTED)
        batch.tokens.append(torch.tensor(s.tokens, dtype=torch.long))
        batch.response_lengths.append(s.response_length)
        mask = [0] * s.response_length if masked else list(s.loss_mask)
        batch.loss_masks.append(torch.tensor(mask, dtype=torch.float32))
        if batch.rollout_log_probs is not None:
            batch.rollout_log_probs.append(torch.tensor(s.rollout_log_probs, dtype=torch.float32))
        batch.rollout_ids.append(s.rollout_id)
        batch.group_indices.append(s.group_index)
        batch.sample_indices.append(s.index)
        batch.weight_versions.append(s.weight_versions[0] if s.weight_versions else -1)
    teacher = [s.train_metadata.get(TEACHER_KEY) for s in samples]  # [opd] mode = "engine"
    if samples and all(t is not None for t in teacher):
        batch.teacher_log_probs = [torch.tensor(t, dtype=torch.float32) for t in teacher]
    batch.raw_rewards = [float(x) for x in raw]
    batch.rewards = [float(x) for x in shaped]
    batch.metadata["n_samples_per_prompt"] = config.rollout.n_samples_per_prompt
    if config.train.routing_replay == "rollout":
        batch.routed_experts = routing_records(samples)
        sizes = [s.rollout_routed_experts.nbytes for s in samples
                 if s.rollout_routed_experts is not None]
        if sizes:
            batch.metadata.setdefault("metrics", {})["rollout/routing_record_bytes"] = (
                sum(sizes) / len(sizes))
    batch.validate()
    return batch


def routing_records(samples: list[Sample]) -> list[Any]:
    """Each sample's routing record as a tensor ``[len(tokens) - 1, layers, top_k]`` (None
    for a masked sample without one); a trained sample without a fitting record fails naming
    it and the field."""
    out: list[Any] = []
    for s in samples:
        rec = s.rollout_routed_experts
        where = f"sample group={s.group_index} index={s.index}: rollout_routed_experts"
        masked = s.remove_sample or s.status in (Status.FAILED, Status.ABORTED)
        if rec is None:
            if not masked:
                raise ValueError(f"{where} is missing, and train.routing_replay = 'rollout' "
                                 "replays it (an engine that records routing: local, sglang)")
            out.append(None)
            continue
        if rec.shape[0] != len(s.tokens) - 1:
            raise ValueError(f"{where} covers {rec.shape[0]} positions, expected "
                             f"len(tokens) - 1 = {len(s.tokens) - 1}")
        out.append(from_record(rec))
    return out
