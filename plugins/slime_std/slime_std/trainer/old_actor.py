"""``train.keep_old_actor``: the weights the engines generated with, kept in the trainer.

slime's ``--keep-old-actor``. With one optimizer step per rollout and synchronous rollouts the
policy before the step is the one that generated the samples, and the PPO ratio's denominator
(``old_log_probs``) is the current policy's. When the engines lag behind the trainer
(``run.async_rollout``, ``weights.update_interval > 1``) the samples come from an older
version; with this option the denominator is computed with the weights of the version that
generated each sample (``TrainBatch.weight_versions``), so the ratio measures the whole policy
change since generation and the clip bounds it.

The trainer snapshots its weights (a CPU copy) whenever they are the ones synced to the
engines: version ``k`` is synced after training step ``k - 1`` when ``k`` is a multiple of
``weights.update_interval`` (and version 0 at the start). Only the newest :data:`KEEP`
snapshots are kept; a sample whose version has no snapshot (older than that, or generated
before a resume: snapshots are not checkpointed) is scored with the current policy and
counted in ``train/old_actor_missing``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from slime_hookspecs import Config, TrainBatch

KEEP = 3  # snapshots kept: one-step-off needs two (the version training and the one generating)


def synced_at_start(config: Config, rollout_id: int) -> bool:
    """Whether the trainer's weights at the start of ``rollout_id``'s step are the version the
    driver synced to the engines (``rollout_id`` is that version's number)."""
    return rollout_id % config.weights.update_interval == 0


class OldActor:
    """Snapshots of the synced weights and the log-probs of a batch under them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._policy = model
        self._module: torch.nn.Module | None = None  # one frozen copy, loaded per version
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.missing = 0  # samples of the last batch scored with the current policy

    def snapshot(self, version: int) -> None:
        self.snapshots[version] = {k: v.detach().to("cpu", copy=True)
                                   for k, v in self._policy.state_dict().items()}
        for old in sorted(self.snapshots)[:-KEEP]:
            del self.snapshots[old]

    def log_probs(self, batch: TrainBatch,
                  score: Callable[[torch.nn.Module, list[int]], list[torch.Tensor]],
                  ) -> list[torch.Tensor]:
        """``old_log_probs`` of ``batch``: each sample under the snapshot of its weight version
        (``score(model, indices)`` computes the log-probs of those samples with ``model``)."""
        versions = list(batch.weight_versions) or [-1] * len(batch)
        out: list[torch.Tensor | None] = [None] * len(batch)
        by_version: dict[int, list[int]] = {}
        for i, v in enumerate(versions):
            by_version.setdefault(int(v) if int(v) in self.snapshots else -1, []).append(i)
        self.missing = len(by_version.get(-1, []))
        for version, idx in by_version.items():
            model = self._policy if version == -1 else self._load(version)
            for i, lp in zip(idx, score(model, idx), strict=True):
                out[i] = lp
        return out  # type: ignore[return-value]

    def _load(self, version: int) -> torch.nn.Module:
        if self._module is None:
            self._module = copy.deepcopy(self._policy).eval().requires_grad_(False)
        self._module.load_state_dict(self.snapshots[version])
        return self._module
