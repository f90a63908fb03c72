"""On-policy distillation: the teacher's log-probs from the engine (engine mode) equal the
trainer's (trainer mode)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from slime_hookspecs import TrainBatch

MODEL = Path(__file__).resolve().parents[4] / "examples" / "tiny_arith" / "model"


def test_engine_scores_equal_the_trainers_teacher_log_probs(make_config):
    """Engine mode and trainer mode give the teacher's log-probs of the same tokens."""
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_std.engine.local_engine import LocalEngine
    from slime_std.trainer.torch_trainer import TorchTrainer

    set_manager(SlimePluginManager(PluginSelection(autoload=False)).load())
    cfg = make_config(model={"path": str(MODEL)}, rollout={"temperature": 0.7},
                      opd={"enabled": True, "teacher_path": str(MODEL)})
    seqs = [[52, 47, 53, 65, 54, 2], [60, 61, 47, 52, 65, 57, 56, 2]]  # "0+1=2</s>", "89+0=54</s>"
    lens = [2, 3]
    engine = LocalEngine(cfg)
    scored = engine.score_tokens(seqs, lens, temperature=0.7)
    trainer = TorchTrainer(cfg)
    batch = TrainBatch(tokens=[torch.tensor(s) for s in seqs], response_lengths=lens)
    want = trainer.compute_log_probs(batch, "teacher")
    for got, ref in zip(scored, want, strict=True):
        assert torch.allclose(torch.tensor(got), ref, atol=1e-4)
    assert all(x <= 0 for row in scored for x in row) and min(min(r) for r in scored) < -0.01
    with pytest.raises(ValueError, match="at least one prompt id"):
        engine.score_tokens([[5, 6]], [2])
