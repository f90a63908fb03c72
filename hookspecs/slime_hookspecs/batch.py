"""``TrainBatch``: what the trainer consumes, one 1-D tensor per sample over its response.

Per-sample lists rather than padded 2-D tensors keep packing cheap (as slime does) and make
loss-mask bookkeeping explicit. ``tokens`` is the exception: it holds prompt + response ids.
Tensors are typed ``Any`` so this module never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

TENSOR_KEYS = (
    "tokens",
    "loss_masks",
    "rollout_log_probs",
    "log_probs",
    "ref_log_probs",
    "old_log_probs",
    "teacher_log_probs",
    "values",
    "advantages",
    "returns",
)


@dataclass
class TrainBatch:
    """Training data for one rollout step (or one micro-batch of it).

    ``response_lengths[i]`` tokens at the end of ``tokens[i]`` are the response;
    every other per-token key has exactly that length. ``rewards`` are the shaped rewards used
    for advantages, ``raw_rewards`` what the reward function returned.
    """

    tokens: list[Any] = field(default_factory=list)  # prompt + response ids per sample
    response_lengths: list[int] = field(default_factory=list)  # T_i: response tokens of sample i
    loss_masks: list[Any] = field(default_factory=list)  # [T_i], 1 = trained
    rewards: list[float] = field(default_factory=list)  # shaped (slime_reward_post_process)
    raw_rewards: list[float] = field(default_factory=list)  # as the reward function returned
    rollout_log_probs: list[Any] | None = None  # [T_i], the engine's
    log_probs: list[Any] | None = None  # [T_i], the current policy's
    ref_log_probs: list[Any] | None = None  # [T_i], the reference model's (needs_ref)
    old_log_probs: list[Any] | None = None  # [T_i], the policy's before this step's updates
    # on-policy distillation: the teacher's log-probs of the response tokens ([opd])
    teacher_log_probs: list[Any] | None = None
    values: list[Any] | None = None  # [T_i], a critic's (slime_ppo)
    advantages: list[Any] | None = None  # [T_i], set by compute_advantages
    returns: list[Any] | None = None  # [T_i], value targets (the advantages without a critic)
    rollout_ids: list[int] = field(default_factory=list)  # Sample.rollout_id (its step)
    group_indices: list[int] = field(default_factory=list)  # Sample.group_index
    sample_indices: list[int] = field(default_factory=list)  # Sample.index
    weight_versions: list[int] = field(default_factory=list)  # Sample.weight_versions[0] (-1: none)
    metadata: dict[str, Any] = field(default_factory=dict)  # per batch; metadata['metrics'] is logged
    # train.routing_replay = "rollout": per sample an integer tensor [len(tokens) - 1, MoE
    # layers, top_k] of the rollout's expert ids (Sample.rollout_routed_experts), or None
    routed_experts: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.response_lengths)

    def keys(self) -> list[str]:
        """Names of the fields that are set (not None and not empty)."""
        out = []
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and not (isinstance(v, (list, dict)) and len(v) == 0):
                out.append(f.name)
        return out

    def __getitem__(self, key: str) -> Any:
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in {f.name for f in fields(self)}:
            raise KeyError(f"TrainBatch has no key {key!r}")
        setattr(self, key, value)

    def select(self, indices: list[int]) -> TrainBatch:
        """A batch of the given samples (per-sample fields indexed, metadata shared)."""
        out = TrainBatch(metadata=self.metadata)
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "metadata" or v is None:
                continue
            setattr(out, f.name, [v[i] for i in indices] if len(v) else [])
        return out

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first per-token key whose length is wrong."""
        n = len(self.response_lengths)
        for key in TENSOR_KEYS:
            v = getattr(self, key)
            if v is None or (key != "tokens" and len(v) == 0):
                continue
            if len(v) != n:
                raise ValueError(f"TrainBatch.{key} has {len(v)} samples, expected {n}")
            for i, t in enumerate(v):
                want = self.response_lengths[i]
                got = len(t)
                if key == "tokens":
                    if got < want:
                        raise ValueError(
                            f"TrainBatch.tokens[{i}] has {got} ids, fewer than its "
                            f"response length {want}"
                        )
                elif got != want:
                    raise ValueError(
                        f"TrainBatch.{key}[{i}] has length {got}, response length is {want}"
                    )
        if self.routed_experts is not None:
            if len(self.routed_experts) != n:
                raise ValueError(f"TrainBatch.routed_experts has {len(self.routed_experts)} "
                                 f"samples, expected {n}")
            for i, r in enumerate(self.routed_experts):
                if r is not None and len(r) != len(self.tokens[i]) - 1:
                    raise ValueError(
                        f"TrainBatch.routed_experts[{i}] covers {len(r)} positions, expected "
                        f"len(tokens) - 1 = {len(self.tokens[i]) - 1}")
