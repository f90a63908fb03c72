"""``train.compile``: the torch.compile'd policy gives the eager policy's loss and gradient norm
on the same batches (inductor's CPU backend here), across micro-batches of different shapes,
and leaves parameter names (checkpoints, weight export) unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.context import set_manager
from slime_core.plugins import PluginSelection, SlimePluginManager
from slime_core.testing import TINY_QWEN2, write_char_tokenizer
from slime_core.trainer.torch_trainer import TorchTrainer
from slime_hookspecs import TrainBatch


def _batch(seed: int) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    prompt, resp = [5, 7, 4, 6], [6, 3, 8, 5]
    tokens = [torch.randint(3, 100, (p + r,), generator=g) for p, r in zip(prompt, resp)]
    return TrainBatch(
        tokens=tokens, response_lengths=resp, loss_masks=[torch.ones(r) for r in resp],
        rewards=[1.0, 0.0, 0.0, 1.0], raw_rewards=[1.0, 0.0, 0.0, 1.0],
        group_indices=[0, 0, 1, 1], rollout_log_probs=[-torch.rand(r, generator=g) for r in resp],
    )


def _train(tmp_path: Path, compile_: bool) -> tuple[list[dict[str, float]], TorchTrainer]:
    from slime_core.session import resolve

    tok = write_char_tokenizer(tmp_path / f"tok{compile_}")
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"], autoload=False), data={
        "model": {"init_config": TINY_QWEN2, "tokenizer": str(tok)},
        # 2 micro-batches of different shapes per step, then a third shape in step 2
        "train": {"compile": compile_, "micro_batch_tokens": 24, "lr": 1e-3},
    })
    set_manager(manager)
    trainer = TorchTrainer(config)
    return [trainer.train_step(_batch(s), s) for s in (0, 1)], trainer


def test_compiled_policy_matches_eager(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    eager, eager_trainer = _train(tmp_path, False)
    compiled, trainer = _train(tmp_path, True)
    assert trainer.model._compiled_call_impl is not None  # Module.compile took effect
    for e, c in zip(eager, compiled, strict=True):
        for key in ("train/loss", "train/grad_norm", "train/pg_loss"):
            assert c[key] == pytest.approx(e[key], rel=1e-4, abs=1e-6), key
    assert trainer.export_weights().keys() == eager_trainer.export_weights().keys()
    assert not any("_orig_mod" in k for k in trainer.export_weights())
