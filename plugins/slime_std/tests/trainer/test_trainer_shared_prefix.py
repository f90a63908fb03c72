"""``train.shared_prefix`` in the ``torch`` trainer: two GRPO steps give the same loss,
gradient norm, entropy and weights with the shared prompt pass on and off (the log-probs
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


def test_trainer_steps_match_with_and_without_shared_prefix(tmp_path, monkeypatch):
    """Two GRPO steps (two micro-batches each) give the same loss, gradient norm, entropy and
    weights with ``train.shared_prefix`` on and off, and the shared path is taken."""
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve
    from slime_core.testing import TINY_QWEN2, write_char_tokenizer
    from slime_core.trainkit import batching
    from slime_std.trainer.torch_trainer import TorchTrainer

    calls = []
    real = batching.shared_prefix_hidden
    monkeypatch.setattr(batching, "shared_prefix_hidden",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    tok = write_char_tokenizer(tmp_path / "tok")
    runs = {}
    for shared in (False, True):
        manager, config = resolve(PluginSelection(plugins=["slime_grpo"], autoload=False), data={
            "model": {"init_config": TINY_QWEN2, "tokenizer": str(tok)},
            "train": {"micro_batch_tokens": 40, "lr": 1e-3, "shared_prefix": shared},
            "algorithm": {"entropy_coef": 0.01},
        })
        set_manager(manager)
        trainer = TorchTrainer(config)
        runs[shared] = ([trainer.train_step(_group_batch(s), s) for s in (0, 1)],
                        trainer.export_weights())
        assert bool(calls) == shared
    for off, on in zip(runs[False][0], runs[True][0], strict=True):
        for key in ("train/loss", "train/grad_norm", "train/pg_loss", "train/entropy"):
            assert on[key] == pytest.approx(off[key], rel=1e-4, abs=1e-6), key
    for name, w in runs[False][1].items():
        # A key bias adds q.b_k to every score of a query alike, which the softmax cancels: its
        # true gradient is 0, and both runs hold only rounding noise (~1e-10) there, which
        # AdamW scales up towards lr * noise / eps. Seen: up to 1.4e-6 apart on one CPU (and
        # under 1e-6 on another), every other tensor within 3e-8.
        atol = 1e-4 if name.endswith("k_proj.bias") else 1e-6
        torch.testing.assert_close(runs[True][1][name], w, atol=atol, rtol=1e-5, msg=name)
