"""``train.shared_prefix`` and ``train.fused_norm`` in the ``torch`` trainer: two GRPO steps
give the same loss, gradient norm, entropy and weights with each on and off (the log-probs
themselves: ``core/tests/trainkit/test_shared_prefix.py``)."""

from __future__ import annotations

import pytest
import torch


def _group_batch(seed: int):
    from slime_hookspecs import TrainBatch

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 100, (n,), generator=g) for n in (5, 8)]
    resp = [6, 3, 8, 5, 1, 7]
    tokens = [torch.cat((prompts[i // 3], torch.randint(3, 100, (r,), generator=g)))
              for i, r in enumerate(resp)]
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0]
    return TrainBatch(tokens=tokens, response_lengths=resp, loss_masks=[torch.ones(r) for r in resp],
                      rewards=rewards, raw_rewards=rewards, group_indices=[0, 0, 0, 1, 1, 1],
                      rollout_log_probs=[-torch.rand(r, generator=g) for r in resp])


def _trainer(tmp_path, train: dict, model: dict | None = None):
    """The ``torch`` trainer of the tiny Qwen2 (or ``model``'s settings; GRPO) with
    ``train`` settings, on the CPU on any host (these tests pretend a device where they need
    one; on a GPU host the trainer would otherwise take the GPU)."""
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve
    from slime_core.testing import TINY_QWEN2, write_char_tokenizer
    from slime_std.trainer.torch_trainer import TorchTrainer

    tok = write_char_tokenizer(tmp_path / "tok")
    manager, config = resolve(PluginSelection(plugins=["slime_grpo"], autoload=False), data={
        "model": {"init_config": TINY_QWEN2, "tokenizer": str(tok), **(model or {})},
        "train": {"micro_batch_tokens": 40, "lr": 1e-3, **train},
        "algorithm": {"entropy_coef": 0.01},
        "run": {"accelerator": "cpu"},
    })
    set_manager(manager)
    return TorchTrainer(config)


def _two_steps(tmp_path, train: dict, trainer=None):
    """Two GRPO steps of :func:`_trainer` (or of ``trainer``): (metrics of each, weights, the
    trainer)."""
    trainer = trainer or _trainer(tmp_path, train)
    return [trainer.train_step(_group_batch(s), s) for s in (0, 1)], trainer.export_weights(), trainer


def _assert_same_steps(off, on, weight_atol: float) -> None:
    for a, b in zip(off[0], on[0], strict=True):
        for key in ("train/loss", "train/grad_norm", "train/pg_loss", "train/entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    for name, w in off[1].items():
        # A key bias adds q.b_k to every score of a query alike, which the softmax cancels: its
        # true gradient is 0, and both runs hold only rounding noise (~1e-10) there, which
        # AdamW scales up towards lr * noise / eps. Seen: up to 1.4e-6 apart on one CPU (and
        # under 1e-6 on another), every other tensor within 3e-8.
        atol = 1e-4 if name.endswith("k_proj.bias") else weight_atol
        torch.testing.assert_close(on[1][name], w, atol=atol, rtol=1e-5, msg=name)


def test_trainer_steps_match_with_and_without_shared_prefix(tmp_path, monkeypatch):
    """Two GRPO steps (two micro-batches each) give the same loss, gradient norm, entropy and
    weights with ``train.shared_prefix`` on and off, and the shared path is taken."""
    from slime_core.trainkit import batching

    calls = []
    real = batching.shared_prefix_hidden
    monkeypatch.setattr(batching, "shared_prefix_hidden",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    runs = {}
    for shared in (False, True):
        runs[shared] = _two_steps(tmp_path / str(shared), {"shared_prefix": shared})
        assert bool(calls) == shared
    _assert_same_steps(runs[False], runs[True], weight_atol=1e-6)


def test_trainer_steps_match_with_and_without_the_fused_norm(tmp_path):
    """``train.fused_norm`` (on by default): applied only when on (the norm itself:
    ``core/tests/trainkit/test_fused_norm.py``), and the steps are the same."""
    runs = {}
    for fused in (False, True):
        runs[fused] = _two_steps(tmp_path / str(fused), {"fused_norm": fused})
        norms = [m for m in runs[fused][2].model.modules() if type(m).__name__ == "Qwen2RMSNorm"]
        assert norms and all(("forward" in vars(m)) is fused for m in norms)
    _assert_same_steps(runs[False], runs[True], weight_atol=1e-5)
