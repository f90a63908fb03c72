"""slime's train-data dicts next to the project's :class:`TrainBatch`.

* :class:`RolloutData`: a ``dict``-like view of a batch under slime's key names
  (``rollout_data["advantages"] = ...`` lands on ``batch.advantages``), what slime's advantage,
  post-process and loss functions receive.
* :func:`batch_from_dict`: the dict a ``custom_convert_samples_to_train_data_path`` function
  returns, as a batch.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Iterator

from slime_hookspecs import Sample, TrainBatch

# slime key -> TrainBatch field; "log_probs" in slime's rollout data are the log-probs computed
# before training (the project's old_log_probs)
KEYS = {
    "tokens": "tokens", "unconcat_tokens": "tokens", "response_lengths": "response_lengths",
    "loss_masks": "loss_masks", "rewards": "rewards", "raw_reward": "raw_rewards",
    "rollout_log_probs": "rollout_log_probs", "ref_log_probs": "ref_log_probs",
    "values": "values", "advantages": "advantages", "returns": "returns",
    "rollout_ids": "rollout_ids", "sample_indices": "sample_indices",
}


class RolloutData(MutableMapping[str, Any]):
    """slime's ``rollout_data`` / ``batch`` dict over a :class:`TrainBatch`."""

    def __init__(self, batch: TrainBatch, extra: dict[str, Any] | None = None) -> None:
        self.batch = batch
        self.extra: dict[str, Any] = dict(extra or {})

    def _derived(self, key: str) -> Any:
        b = self.batch
        if key == "total_lengths":
            return [len(t) for t in b.tokens]
        if key == "log_probs":
            return b.old_log_probs if b.old_log_probs is not None else b.log_probs
        if key == "kl":  # slime's k1 estimate, zeros without a reference
            import torch

            if b.ref_log_probs is None or self["log_probs"] is None:
                return [torch.zeros(n) for n in b.response_lengths]
            return [lp - ref for lp, ref in zip(self["log_probs"], b.ref_log_probs)]
        if key == "rollout_mask_sums":
            sums: dict[int, float] = {}
            ids = b.rollout_ids or list(range(len(b)))
            for rid, m in zip(ids, b.loss_masks):
                sums[rid] = sums.get(rid, 0.0) + float(m.sum())
            return [sums[rid] for rid in ids]
        raise KeyError(key)

    def __getitem__(self, key: str) -> Any:
        if key in self.extra:
            return self.extra[key]
        if key in KEYS:
            value = getattr(self.batch, KEYS[key])
            if value is None:
                raise KeyError(key)
            return value
        return self._derived(key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key in KEYS:
            setattr(self.batch, KEYS[key], list(value) if value is not None else None)
        elif key == "log_probs":
            self.batch.old_log_probs = list(value)
        else:
            self.extra[key] = value

    def __delitem__(self, key: str) -> None:
        if key in self.extra:
            del self.extra[key]
        elif key in KEYS and KEYS[key] in ("rollout_log_probs", "ref_log_probs", "values",
                                           "advantages", "returns"):
            setattr(self.batch, KEYS[key], None)
        else:
            raise KeyError(key)

    def _present(self) -> list[str]:
        keys = [k for k in KEYS if getattr(self.batch, KEYS[k]) not in (None, [])]
        keys += ["total_lengths", "log_probs"] if self.batch.old_log_probs is not None else ["total_lengths"]
        return keys + [k for k in self.extra if k not in keys]

    def __iter__(self) -> Iterator[str]:
        return iter(self._present())

    def __len__(self) -> int:
        return len(self._present())

    def __contains__(self, key: object) -> bool:
        return key in self._present() or key in ("kl", "rollout_mask_sums")


def batch_from_dict(data: dict[str, Any], samples: list[Sample], config: Any) -> TrainBatch:
    """A slime train-data dict (``tokens``, ``response_lengths``, ``rewards``, ``loss_masks``,
    optional ``raw_reward``, ``rollout_log_probs``, ``rollout_ids``, ``sample_indices``) as a
    batch; keys with no batch field are kept in ``batch.metadata["slime"]``."""
    import torch

    missing = [k for k in ("tokens", "response_lengths", "rewards") if k not in data]
    if missing:
        raise ValueError(f"[slime].custom_convert_samples_to_train_data_path returned a dict "
                         f"without {missing}; slime's train data has tokens, response_lengths, "
                         f"rewards, loss_masks")
    n = len(data["tokens"])
    lengths = [int(x) for x in data["response_lengths"]]
    masks = data.get("loss_masks") or [[1] * r for r in lengths]
    batch = TrainBatch(
        tokens=[torch.as_tensor(t, dtype=torch.long) for t in data["tokens"]],
        response_lengths=lengths,
        loss_masks=[torch.as_tensor(m, dtype=torch.float32) for m in masks],
        rewards=[float(r) for r in _floats(data["rewards"])],
        raw_rewards=[float(r) for r in _floats(data.get("raw_reward", data["rewards"]))],
    )
    if data.get("rollout_log_probs") is not None:
        batch.rollout_log_probs = [torch.as_tensor(x, dtype=torch.float32)
                                   for x in data["rollout_log_probs"]]
    by_index = len(samples) == n
    batch.rollout_ids = [int(x) for x in data.get("rollout_ids") or
                         ([s.rollout_id for s in samples] if by_index else [0] * n)]
    batch.sample_indices = [int(x) for x in data.get("sample_indices") or
                            ([s.index for s in samples] if by_index else list(range(n)))]
    batch.group_indices = [s.group_index for s in samples] if by_index else list(range(n))
    batch.weight_versions = ([s.weight_versions[0] if s.weight_versions else -1 for s in samples]
                             if by_index else [-1] * n)
    batch.metadata["n_samples_per_prompt"] = config.rollout.n_samples_per_prompt
    batch.metadata["slime"] = {k: v for k, v in data.items() if k not in KEYS}
    batch.validate()
    return batch


def _floats(values: Any) -> list[float]:
    return values.tolist() if hasattr(values, "tolist") else list(values)
