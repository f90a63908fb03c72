"""``rollout.dtype``: the engine serves in bf16 while the trainer trains in fp32, in a run.

The engine's weights are bf16 at every sync and follow the trainer's updates; the trainer's
log-probs differ from the rollout's by the rounding, which the mismatch metric shows (an fp32
engine beside the same trainer agrees to float rounding).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from slime_hookspecs import hookimpl

from tests.conftest import read_metrics, reward_record


class EngineProbe:
    """The local engines' parameter dtypes and a weight's values after every sync."""

    def __init__(self) -> None:
        self.clients: list[Any] = []
        self.syncs: list[tuple[set[torch.dtype], torch.Tensor]] = []

    @hookimpl
    def slime_register_reward_functions(self) -> Any:
        # half of each group right: nonzero advantages, so every step updates the weights
        return reward_record("alternate", lambda sample: float(sample.index % 2))

    @hookimpl
    def slime_rollout_engines_ready(self, config: Any, clients: list[Any]) -> None:
        self.clients = list(clients)

    @hookimpl
    def slime_after_weight_sync(self, config: Any, version: int, stats: dict[str, float]) -> None:
        model = self.clients[0].engine._model
        weight = model.state_dict()["model.layers.0.mlp.down_proj.weight"]
        self.syncs.append(({p.dtype for p in model.parameters()}, weight.clone()))


def test_bf16_rollout_beside_fp32_training(base_config, run_slime) -> None:
    runs = {}
    for dtype in ("", "bfloat16"):
        run_dir = f"{base_config['run']['run_dir']}{dtype}"
        config = {**base_config, "model": {**base_config["model"], "dtype": "float32"},
                  "rollout": {**base_config["rollout"], "dtype": dtype, "reward": "alternate"},
                  "run": {**base_config["run"], "run_dir": run_dir}}
        probe = EngineProbe()
        runs[dtype] = (read_metrics(run_slime(config, [probe])), probe)
    metrics, probe = runs["bfloat16"]
    assert len(probe.syncs) == 3  # the initial sync and one after each of the 2 steps
    assert all(dtypes == {torch.bfloat16} for dtypes, _ in probe.syncs)
    assert not torch.equal(probe.syncs[0][1], probe.syncs[-1][1])  # updates reach the engine
    fp32 = max(m["train/mismatch_abs_logprob_diff"] for m in runs[""][0])
    bf16 = min(m["train/mismatch_abs_logprob_diff"] for m in metrics)
    assert all(dtypes == {torch.float32} for dtypes, _ in runs[""][1].syncs)
    assert fp32 < 1e-4 and bf16 > 10 * fp32, (fp32, bf16)


def test_weights_verify_with_another_rollout_dtype_is_refused(base_config, run_slime) -> None:
    config = {**base_config, "model": {**base_config["model"], "dtype": "float32"},
              "rollout": {**base_config["rollout"], "dtype": "bfloat16"},
              "weights": {"verify": True}}
    with pytest.raises(ValueError, match=r"rollout.dtype = 'bfloat16' with weights.verify"):
        run_slime(config)
