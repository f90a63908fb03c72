"""On-policy distillation: the advantage term against hand-computed values (the teacher's
log-probs from the engine equal to the trainer's: slime-std's ``tests/trainer/test_trainer_opd.py``)."""

from __future__ import annotations

import pytest
import torch
from slime_core.algo.opd import apply_opd, zero_task_rewards
from slime_hookspecs import TrainBatch


def _batch() -> TrainBatch:
    b = TrainBatch(response_lengths=[3, 2], rewards=[1.0, 0.0])
    b.loss_masks = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, 1.0])]
    b.old_log_probs = [torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([-0.5, -0.5])]
    b.teacher_log_probs = [torch.tensor([-0.5, -4.0, -1.0]), torch.tensor([-1.5, -0.5])]
    b.advantages = [torch.tensor([0.5, 0.5, 0.5]), torch.tensor(-0.5)]  # per token / scalar
    return b


def test_advantage_gets_minus_coef_times_reverse_kl(make_config):
    cfg = make_config(opd={"enabled": True, "teacher_path": "t", "kl_coef": 0.5})
    b = _batch()
    apply_opd(cfg, b)
    # d = student - teacher: [-0.5, 2.0, -2.0] and [1.0, 0.0]
    assert torch.allclose(b.advantages[0], torch.tensor([0.75, -0.5, 1.5]))
    assert torch.allclose(b.advantages[1], torch.tensor([-1.0, -0.5]))
    # per-sample mean over loss-masked tokens, then over samples: ((-0.5+2)/2 + 1/2) / 2
    assert b.metadata["metrics"]["train/opd_reverse_kl"] == pytest.approx(0.625)


def test_off_and_pure_distillation(make_config):
    b = _batch()
    apply_opd(make_config(), b)  # opd off: untouched
    assert torch.equal(b.advantages[0], torch.tensor([0.5, 0.5, 0.5])) and not b.metadata
    pure = make_config(opd={"enabled": True, "teacher_path": "t", "task_reward": False})
    zero_task_rewards(pure, b)
    assert b.rewards == [0.0, 0.0]
    b.teacher_log_probs = None
    with pytest.raises(ValueError, match="no teacher_log_probs"):
        apply_opd(pure, b)


def test_config_needs_a_teacher_and_a_known_mode(make_config):
    from slime_core.config import ConfigError

    with pytest.raises(ConfigError, match="opd.teacher_path"):
        make_config(opd={"enabled": True})
    with pytest.raises(ConfigError, match="opd.mode"):
        make_config(opd={"mode": "sglang"})
