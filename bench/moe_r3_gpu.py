"""A Qwen3-30B-A3B-shaped MoE with fewer layers (random weights, bf16): rollout through the
``local`` engine with routing recorded, then the ``torch`` trainer: tokens/s of both, training
MFU, and the train-vs-rollout log-prob mismatch with routing replay off and on, on the same
samples.

    python bench/moe_r3_gpu.py --layers 4 --out /tmp/moe_r3.json      # one H200 (or H100)
    python bench/moe_r3_gpu.py --tiny                                    # CPU smoke test

Model: Qwen3-30B-A3B's shape (hidden 2048, 32 query / 4 key-value heads of 128, 128 experts of
768, top-8 renormalised, vocab 151,936, untied) with ``--layers`` decoder layers, every one MoE;
random weights (seeded; engine and trainer build the same ones), ``model.dtype = bfloat16``.
Experts run transformers' ``--experts-impl`` (``grouped_mm`` on GPUs; ``eager``: its per-expert
loop).

Steps: ``--prompts`` random prompts of ``--prompt-len`` ids, ``--n`` samples each, exactly
``--new-tokens`` new tokens (EOS ignored), T = 1. Then on those samples: the trainer policy's
no-grad log-probs of the response tokens without replay and with the recorded routing, each
against the engine's log-probs (mean |difference| over response tokens: the mismatch metric
of ``train/mismatch_abs_logprob_diff``), the replay's agreement, and ``--train-steps`` GRPO
training steps (random 0/1 rewards, replay on) timed after one warm-up step.

MFU: 6 x active parameters x trained tokens / step time / peak, active parameters counting 8 of
128 experts per layer and the LM head, attention's sequence-length FLOPs left out (small at
these lengths); peak ``--peak-tflops`` (989: H100/H200 SXM dense bf16).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 40960,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "decoder_sparse_step": 1, "mlp_only_layers": [],
}
TINY = {"vocab_size": 512, "hidden_size": 64, "moe_intermediate_size": 32, "num_experts": 16,
        "num_experts_per_tok": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _mismatch(train: list[torch.Tensor], rollout: list[list[float]]) -> float:
    num = sum(float((t.float().cpu() - torch.tensor(r)).abs().sum()) for t, r in zip(train, rollout, strict=True))
    return num / sum(len(r) for r in rollout)


def main() -> None:
    from slime_core.context import set_manager
    from slime_core.moe.routing import from_record
    from slime_core.session import resolve
    from slime_core.testing import write_char_tokenizer
    from slime_core.trainkit.batching import response_log_probs
    from slime_hookspecs import SamplingParams, TrainBatch
    from slime_std.engine.local_engine import LocalEngine
    from slime_std.trainer.torch_trainer import TorchTrainer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--experts-impl", default="grouped_mm")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--tiny", action="store_true", help="a small model for a CPU smoke test")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    init = dict(QWEN3_30B_A3B, num_hidden_layers=args.layers)
    if args.tiny:
        init.update(TINY)
        args.prompts, args.n, args.prompt_len, args.new_tokens = 2, 2, 16, 8
        args.experts_impl = "eager"
    init["experts_implementation"] = args.experts_impl
    tok = write_char_tokenizer(Path(tempfile.mkdtemp()) / "tok")
    data = {
        "model": {"init_config": init, "tokenizer": str(tok), "dtype": "bfloat16"},
        "train": {"routing_replay": "rollout", "lr": 1e-6,
                  "micro_batch_tokens": args.micro_batch_tokens},
        "rollout": {"temperature": 1.0, "n_samples_per_prompt": args.n},
        "run": {"executor": "local"},
    }
    from bench_plugin import plugin_selection

    manager, config = resolve(plugin_selection(), None, (), data)
    set_manager(manager)
    accel = None
    if torch.cuda.is_available():
        from slime_core.runtime.accelerator import select_accelerator
        accel = select_accelerator(manager, "auto").factory()
    report: dict[str, Any] = {"config": {k: v for k, v in vars(args).items()},
                              "device": torch.cuda.get_device_name() if accel else "cpu"}
    engine = LocalEngine(config, 0, accel)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, init["vocab_size"], (args.prompt_len,), generator=g).tolist()
               for _ in range(args.prompts) for _ in range(args.n)]
    params = [SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, ignore_eos=True,
                             seed=i) for i in range(len(prompts))]
    engine.generate(prompts[:2], [p.replace(max_new_tokens=4) for p in params[:2]])  # warm-up
    _sync()
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    _sync()
    gen_s = time.perf_counter() - t0
    new = sum(len(o.token_ids) for o in outs)
    report["rollout"] = {"seconds": gen_s, "new_tokens_per_s": new / gen_s,
                         "record_bytes_per_sample": statistics.fmean(
                             o.routed_experts.nbytes for o in outs)}
    print(f"rollout: {new} tokens in {gen_s:.1f} s ({new / gen_s:.0f} tok/s)", file=sys.stderr)
    engine.shutdown()
    del engine
    if accel is not None:
        torch.cuda.empty_cache()

    trainer = TorchTrainer(config, 0, 1, accel)
    seqs = [torch.tensor(p + o.token_ids) for p, o in zip(prompts, outs, strict=True)]
    resp = [len(o.token_ids) for o in outs]
    routes = [from_record(o.routed_experts) for o in outs]
    rollout_lps = [o.log_probs for o in outs]
    lps: dict[str, list[torch.Tensor]] = {"off": [], "rollout": []}
    trainer.routing.agreement()
    with torch.no_grad():
        for mb in trainer._plan(seqs, resp, False):
            for mode in ("off", "rollout"):
                extra = {"routing": trainer.routing, "routes": [routes[i] for i in mb]} \
                    if mode == "rollout" else {}
                out, _ = response_log_probs(trainer.model, [seqs[i] for i in mb],
                                            [resp[i] for i in mb], 1.0, trainer.pad_id, **extra)
                lps[mode] += out
    order = [i for mb in trainer._plan(seqs, resp, False) for i in mb]
    ordered_rollout = [rollout_lps[i] for i in order]
    report["mismatch_abs_logprob_diff"] = {m: _mismatch(lps[m], ordered_rollout) for m in lps}
    report["routing_replay_agreement"] = trainer.routing.agreement()
    print(f"mismatch: R3 off {report['mismatch_abs_logprob_diff']['off']:.4g}, on "
          f"{report['mismatch_abs_logprob_diff']['rollout']:.4g}; agreement "
          f"{report['routing_replay_agreement']:.4f}", file=sys.stderr)

    def batch() -> TrainBatch:
        rewards = torch.randint(0, 2, (len(seqs),), generator=g).float().tolist()
        return TrainBatch(
            tokens=[s.clone() for s in seqs], response_lengths=list(resp),
            loss_masks=[torch.ones(r) for r in resp], rewards=rewards, raw_rewards=rewards,
            rollout_log_probs=[torch.tensor(x) for x in rollout_lps],
            rollout_ids=[0] * len(seqs), group_indices=[i // args.n for i in range(len(seqs))],
            sample_indices=list(range(len(seqs))), weight_versions=[0] * len(seqs),
            metadata={"n_samples_per_prompt": args.n}, routed_experts=list(routes))

    trainer.train_step(batch(), 0)  # warm-up (allocations, kernels)
    times = []
    for step in range(args.train_steps):
        _sync()
        t0 = time.perf_counter()
        metrics = trainer.train_step(batch(), step + 1)
        _sync()
        times.append(time.perf_counter() - t0)
    tokens = sum(len(s) for s in seqs)
    params_all = sum(p.numel() for p in trainer.model.parameters())
    experts = sum(p.numel() for n, p in trainer.model.named_parameters() if ".experts." in n)
    active = params_all - experts + experts * init["num_experts_per_tok"] / init["num_experts"]
    step_s = statistics.median(times)
    report["train"] = {"step_seconds": times, "tokens_per_s": tokens / step_s,
                       "parameters": params_all, "active_parameters": active,
                       "mfu": 6 * active * tokens / step_s / (args.peak_tflops * 1e12),
                       "last_metrics": metrics}
    print(f"train: {tokens} tokens/step, {step_s:.2f} s/step ({tokens / step_s:.0f} tok/s), "
          f"MFU {report['train']['mfu']:.3f} ({active / 1e9:.2f}B active of "
          f"{params_all / 1e9:.2f}B)", file=sys.stderr)
    text = json.dumps(report, indent=1, default=float)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
