"""``train.shared_prefix``: response log-probs with each shared prompt computed once equal one
unpadded forward per sample, in values and in every parameter's gradient, for every model
family the fused head supports (GQA, biases, llama3 rope, Qwen3 q/k norms, Mistral)."""

from __future__ import annotations

import pytest
import torch
from slime_core.trainkit.batching import response_log_probs
from slime_core.trainkit.shared_prefix import prompt_groups, shared_prefix_hidden

from ..engine.test_fused_decoder import ARCHS, _model
from .test_trainer_log_probs import _reference

PAD = 0


def _batch(vocab: int) -> tuple[list[torch.Tensor], list[int]]:
    """Three prompts of different lengths (so the prompt pass pads), in groups of 3, 2 and 1,
    interleaved, with responses of different lengths: one token, and empty."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, vocab, (n,), generator=g) for n in (6, 3, 9)]
    plan = [(0, 5), (1, 1), (0, 7), (2, 4), (1, 6), (0, 0)]
    tokens = [torch.cat((prompts[p], torch.randint(1, vocab, (r,), generator=g))) for p, r in plan]
    return tokens, [r for _, r in plan]


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_shared_prefix_matches_per_sample_forwards(arch):
    model = _model(arch).train()
    tokens, resp = _batch(model.config.vocab_size)
    lps, ents = response_log_probs(model, tokens, resp, 0.8, PAD, with_entropy=True,
                                   fused_head=True, shared_prefix=True)
    assert [len(x) for x in lps] == [len(x) for x in ents] == resp
    (sum((lp * (i + 1)).sum() for i, lp in enumerate(lps)) + sum(e.sum() for e in ents)).backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    ref_lps, ref_ents = _reference(model, tokens, resp, 0.8)
    (sum((lp * (i + 1)).sum() for i, lp in enumerate(ref_lps))
     + sum(e.sum() for e in ref_ents)).backward()
    for a, b in zip(lps + ents, ref_lps + ref_ents, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
    for n, p in model.named_parameters():
        assert got[n].abs().sum() > 0, n  # every parameter, prompt pass included, gets a gradient
        torch.testing.assert_close(got[n], p.grad, atol=5e-5, rtol=1e-4, msg=n)


def test_prompt_padding_is_masked():
    """A prompt's row in the prompt pass is padded to the longest prompt; the padding keys
    must not reach its responses: changing the pad id changes nothing."""
    model = _model("qwen2_gqa_bias")
    tokens, resp = _batch(model.config.vocab_size)
    groups = prompt_groups(tokens, resp)
    with torch.no_grad():
        a, ta = shared_prefix_hidden(model.model, tokens, resp, groups, pad_id=0)
        b, tb = shared_prefix_hidden(model.model, tokens, resp, groups, pad_id=37)
    assert torch.equal(ta, tb)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_prompt_groups():
    t = [torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 5]), torch.tensor([1, 3, 3])]
    # prompts [1, 2], [1, 2], [1]: the first two share
    assert prompt_groups(t, [2, 1, 2]) == [0, 0, 1]
    assert prompt_groups(t, [2, 2, 2]) == [0, 1, 1]  # [1, 2], [1], [1]
    assert prompt_groups(t[:2], [1, 1]) is None  # [1, 2, 3] and [1, 2]: nothing shared
    assert prompt_groups(t, [4, 1, 2]) is None  # a sample without a prompt token


def test_no_shared_prompt_falls_back_to_one_row_per_sample():
    model = _model("llama_mha_untied")
    tokens, resp = _batch(model.config.vocab_size)
    keep = [0, 1, 3]  # one sample of each prompt
    tokens, resp = [tokens[i] for i in keep], [resp[i] for i in keep]
    assert prompt_groups(tokens, resp) is None
    with torch.no_grad():
        lps, _ = response_log_probs(model, tokens, resp, 1.0, PAD, fused_head=True,
                                    shared_prefix=True)
        ref, _ = _reference(model, tokens, resp, 1.0)
    for a, b in zip(lps, ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


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
    from slime_core.trainer.torch_trainer import TorchTrainer
    from slime_core.trainkit import batching

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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shared_prefix_on_cuda(dtype):
    """On a GPU (SDPA's CUDA kernels, padded masks): values and gradients against the one-row
    path, within the dtype's rounding."""
    model = _model("qwen2_gqa_bias").to("cuda", dtype).train()
    tokens, resp = _batch(model.config.vocab_size)
    tokens = [t.cuda() for t in tokens]
    out = {}
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        lps, _ = response_log_probs(model, tokens, resp, 0.8, PAD, fused_head=True,
                                    shared_prefix=shared)
        sum((lp * (i + 1)).sum() for i, lp in enumerate(lps)).backward()
        out[shared] = (torch.cat(lps).float(),
                       {n: p.grad.float().clone() for n, p in model.named_parameters()})
    tol = 1e-4 if dtype == torch.float32 else 0.1
    torch.testing.assert_close(out[True][0], out[False][0], atol=tol, rtol=tol)
    for n, g in out[False][1].items():
        err = (out[True][1][n] - g).norm() / g.norm().clamp_min(1e-12)
        assert err < (1e-4 if dtype == torch.float32 else 0.05), (n, float(err))
