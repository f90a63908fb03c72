"""The :class:`~slime_hookspecs.Trainer` protocol over several trainer ranks, whatever runs them
(Ray actors, or the local executor's rank processes).

Ranks and data-parallel indices. A backend with model parallelism (Megatron: tensor, pipeline,
context parallel) holds one model replica over several ranks; every rank of one replica must
see the same samples. After building, each rank reports its layout: the trainer's
``data_parallel_rank`` and ``data_parallel_size`` attributes (a backend without them is pure
data parallel: ``rank`` and ``world_size``). The step's samples are split over the
``data_parallel_size`` indices (:func:`~slime_core.executors.sharding.shard_by_tokens`: whole
groups, balanced by tokens) and every rank gets its index's share. Results that are the same
on every rank of a replica (log-probs, throughput) are taken from the replica's first rank.

Weight export is a collective when the model is split (TP shards are gathered): then every
rank calls ``export_weights`` at once and rank 0's answer is used; with pure data parallelism
only rank 0 is asked (every rank holds the same replica).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from slime_hookspecs import TrainBatch

from slime_core.executors.sharding import imbalance, shard_by_tokens


def rank_layout(trainer: Any, rank: int, world_size: int) -> tuple[int, int]:
    """``(data_parallel_rank, data_parallel_size)`` of one built trainer rank."""
    dp_rank = int(getattr(trainer, "data_parallel_rank", rank))
    dp_size = int(getattr(trainer, "data_parallel_size", world_size))
    if dp_size < 1 or world_size % dp_size or not 0 <= dp_rank < dp_size:
        raise ValueError(
            f"trainer rank {rank}: data_parallel_rank={dp_rank}, data_parallel_size={dp_size} "
            f"do not divide world_size={world_size}"
        )
    return dp_rank, dp_size


class TrainerGroup(ABC):
    """The trainer ranks seen as one trainer. Subclasses say how to call every rank."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.dp_ranks: list[int] = list(range(world_size))
        self.dp_size = world_size

    # -- what a subclass provides ------------------------------------------------------------
    @abstractmethod
    def call(self, method: str, args: list[tuple[Any, ...]], what: str) -> list[Any]:
        """Call ``method(*args[r])`` on every rank ``r`` at once; the results in rank order."""

    @abstractmethod
    def call_rank0(self, method: str, args: tuple[Any, ...], what: str) -> Any:
        """Call ``method(*args)`` on rank 0 only."""

    # -- layout ------------------------------------------------------------------------------
    def set_layout(self, layouts: list[tuple[int, int]]) -> None:
        sizes = {size for _, size in layouts}
        if len(sizes) != 1:
            raise ValueError(f"trainer ranks disagree on the data-parallel size: {layouts}")
        self.dp_size = sizes.pop()
        self.dp_ranks = [r for r, _ in layouts]
        if sorted(set(self.dp_ranks)) != list(range(self.dp_size)):
            raise ValueError(f"trainer ranks do not cover every data-parallel index: {layouts}")

    @property
    def collective_export(self) -> bool:
        """Whether weight export needs every rank (the model is split over ranks)."""
        return self.dp_size < self.world_size

    def _leaders(self) -> list[int]:
        """The first rank of each data-parallel index, in index order."""
        first: dict[int, int] = {}
        for rank, d in enumerate(self.dp_ranks):
            first.setdefault(d, rank)
        return [first[d] for d in range(self.dp_size)]

    def _shards(self, batch: TrainBatch) -> list[list[int]]:
        if self.dp_size == 1:
            return [list(range(len(batch)))]
        if len(batch.group_indices) != len(batch):
            raise ValueError(
                "data-parallel training needs TrainBatch.group_indices (one per sample) to keep "
                "groups on one rank; a custom slime_convert_samples_to_train_data must set them"
            )
        return shard_by_tokens(list(batch.group_indices), [len(t) for t in batch.tokens],
                               self.dp_size)

    def _parts(self, batch: TrainBatch, shards: list[list[int]]) -> list[TrainBatch]:
        if self.dp_size == 1:
            return [batch] * self.world_size
        by_index = [batch.select(s) for s in shards]
        return [by_index[d] for d in self.dp_ranks]

    # -- the Trainer protocol ----------------------------------------------------------------
    def train_step(self, batch: TrainBatch, rollout_id: int) -> dict[str, float]:
        shards = self._shards(batch)
        results = self.call("train_step", [(p, rollout_id) for p in self._parts(batch, shards)],
                            f"train_step of rollout {rollout_id} (trainer ranks)")
        metrics = dict(results[0])  # ranks agree after the all-reduce; perf is per replica
        if self.world_size > 1:
            metrics["perf/train_tokens_per_s"] = sum(
                results[r].get("perf/train_tokens_per_s", 0.0) for r in self._leaders())
        if self.dp_size > 1:
            metrics["train/dp_token_imbalance"] = imbalance([len(t) for t in batch.tokens],
                                                            shards)
        return metrics

    def compute_log_probs(self, batch: TrainBatch, role: str) -> list[Any]:
        shards = self._shards(batch)
        results = self.call("compute_log_probs",
                            [(p, role) for p in self._parts(batch, shards)], "compute_log_probs")
        out: list[Any] = [None] * len(batch)
        for d, rank in enumerate(self._leaders()):
            for i, lp in zip(shards[d], results[rank], strict=True):
                out[i] = lp
        return out

    def save(self, path: str) -> None:
        self.call("save", [(path,)] * self.world_size, f"save to {path}")

    def load(self, path: str) -> None:
        self.call("load", [(path,)] * self.world_size, f"load from {path}")

    def export_weights(self) -> dict[str, Any]:
        if self.collective_export:
            return self.call("export_weights", [()] * self.world_size, "export_weights")[0]
        return self.call_rank0("export_weights", (), "export_weights")

    def weights_digest(self) -> str:
        if self.collective_export:
            return self.call("weights_digest", [()] * self.world_size, "weights_digest")[0]
        return self.call_rank0("weights_digest", (), "weights_digest")
