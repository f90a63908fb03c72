"""``train.moe_aux_loss_coef`` / ``moe_z_loss_coef`` in the ``torch`` trainer: a step's
gradients differ from the coefficient-0 step's by exactly ``coef x`` the gradient of the
router losses of the same micro-batches (padding excluded), and the values are logged."""

from __future__ import annotations

import pytest
import torch


def _batch():
    from slime_hookspecs import TrainBatch

    g = torch.Generator().manual_seed(1)
    resp = [4, 2, 5, 3]
    tokens = [torch.randint(3, 100, (n,), generator=g) for n in (9, 6, 11, 7)]
    rewards = [1.0, 0.0, 0.0, 1.0]
    return TrainBatch(tokens=tokens, response_lengths=resp, loss_masks=[torch.ones(r) for r in resp],
                      rewards=rewards, raw_rewards=rewards, group_indices=[0, 0, 1, 1],
                      rollout_log_probs=[-torch.rand(r, generator=g) for r in resp])


@pytest.mark.parametrize(("fused_head", "reducer"), [(True, "seq_mean_token_mean"),
                                                     (False, "token_mean")])
def test_router_losses_add_coef_times_their_gradient(tmp_path, fused_head, reducer):
    from slime_core.api import RouterCapture, right_pad
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve
    from slime_core.testing import TINY_QWEN3_MOE, write_char_tokenizer
    from slime_std.trainer.torch_trainer import TorchTrainer

    tok = write_char_tokenizer(tmp_path / "tok")
    aux_coef, z_coef = 0.5, 0.25
    grads, metrics = {}, {}
    for on in (False, True):
        manager, config = resolve(PluginSelection(plugins=["slime_grpo"], autoload=False), data={
            "model": {"init_config": dict(TINY_QWEN3_MOE, initializer_range=0.2),
                      "tokenizer": str(tok)},
            # lr 0 and no clipping: the step leaves the weights and the gradients readable;
            # 40 tokens: two micro-batches, each at its share
            "train": {"micro_batch_tokens": 40, "lr": 0.0, "grad_clip": 0.0,
                      "fused_head": fused_head,
                      "moe_aux_loss_coef": aux_coef if on else 0.0,
                      "moe_z_loss_coef": z_coef if on else 0.0},
            "algorithm": {"loss_reducer": reducer},
        })
        set_manager(manager)
        trainer = TorchTrainer(config)
        metrics[on] = trainer.train_step(_batch(), 0)
        grads[on] = {n: p.grad.clone() for n, p in trainer.model.named_parameters()
                     if p.grad is not None}
        if on:  # the router losses' own gradient, micro-batch by micro-batch at its share
            model, batch = trainer.model, _batch()
            model.zero_grad(set_to_none=True)
            capture = RouterCapture(model)
            plan = trainer._plan(batch.tokens, batch.response_lengths, False)
            assert len(plan) == 2
            for mb in plan:
                ids, attn = right_pad([batch.tokens[i] for i in mb])
                with capture.capturing():
                    model(input_ids=ids, attention_mask=attn)
                aux, z = capture.losses(attn)
                # the micro-batch's share of the policy loss: by samples under
                # seq_mean_token_mean, by loss-masked tokens under token_mean
                share = (len(mb) / len(batch) if reducer == "seq_mean_token_mean" else
                         sum(float(batch.loss_masks[i].sum()) for i in mb)
                         / sum(float(m.sum()) for m in batch.loss_masks))
                ((aux_coef * aux + z_coef * z) * share).backward()
            want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert "train/moe_aux_loss" not in metrics[False]
    assert metrics[True]["train/moe_aux_loss"] > 0 and metrics[True]["train/moe_z_loss"] > 0
    routers = [n for n in grads[True] if n.endswith("mlp.gate.weight")]
    assert routers
    for name in routers:
        diff = grads[True][name] - grads[False][name]
        assert diff.abs().max() > 1e-6, name  # the aux terms move the routers
        torch.testing.assert_close(diff, want[name], rtol=1e-4, atol=1e-6, msg=name)
