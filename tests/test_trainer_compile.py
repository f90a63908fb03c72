"""``train.compile`` and ``train.fused_head``: the torch.compile'd policy, and the response
log-probs taken through ``logprob_head`` (eager and compiled), give the eager model forward's
loss and gradient norm on the same batches (inductor's CPU backend here), across micro-batches
of different shapes, and leave parameter names (checkpoints, weight export) unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from slime_core.context import set_manager
from slime_core.pluginmgr import PluginSelection
from slime_core.testing import TINY_QWEN2, write_char_tokenizer
from slime_hookspecs import TrainBatch
from slime_std.trainer.torch_trainer import TorchTrainer


def _batch(seed: int) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    prompt, resp = [5, 7, 4, 6], [6, 3, 8, 5]
    tokens = [torch.randint(3, 100, (p + r,), generator=g) for p, r in zip(prompt, resp)]
    return TrainBatch(
        tokens=tokens, response_lengths=resp, loss_masks=[torch.ones(r) for r in resp],
        rewards=[1.0, 0.0, 0.0, 1.0], raw_rewards=[1.0, 0.0, 0.0, 1.0],
        group_indices=[0, 0, 1, 1], rollout_log_probs=[-torch.rand(r, generator=g) for r in resp],
    )


def _train(tmp_path: Path, compile_: bool,
           fused_head: bool) -> tuple[list[dict[str, float]], TorchTrainer]:
    from slime_core.session import resolve

    tok = write_char_tokenizer(tmp_path / f"tok{compile_}{fused_head}")
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"], autoload=False), data={
        "model": {"init_config": TINY_QWEN2, "tokenizer": str(tok)},
        # 2 micro-batches of different shapes per step, then a third shape in step 2
        "train": {"compile": compile_, "micro_batch_tokens": 24, "lr": 1e-3,
                  "fused_head": fused_head},
    })
    set_manager(manager)
    trainer = TorchTrainer(config)
    return [trainer.train_step(_batch(s), s) for s in (0, 1)], trainer


@pytest.mark.parametrize(("compile_", "fused_head"), [(True, False), (False, True), (True, True)],
                         ids=["compiled", "fused_head", "compiled_fused_head"])
def test_matches_the_eager_model_forward(tmp_path: Path, compile_: bool, fused_head: bool) -> None:
    torch.set_num_threads(1)
    eager, eager_trainer = _train(tmp_path, False, False)
    assert not eager_trainer.fused_head
    compiled, trainer = _train(tmp_path, compile_, fused_head)
    assert trainer.fused_head == fused_head
    called = trainer.model.model if fused_head else trainer.model  # what the trainer calls
    assert (called._compiled_call_impl is not None) == compile_  # Module.compile took effect
    for e, c in zip(eager, compiled, strict=True):
        for key in ("train/loss", "train/grad_norm", "train/pg_loss", "train/entropy"):
            assert c[key] == pytest.approx(e[key], rel=1e-4, abs=1e-6), key
    assert trainer.export_weights().keys() == eager_trainer.export_weights().keys()
    assert not any("_orig_mod" in k for k in trainer.export_weights())
