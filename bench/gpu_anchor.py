"""slime on the anchor GPU workload (../shared/anchors/): one GRPO step against the H200's ceilings.

Workload (as TRL's anchor, ``trl_grpo_h200.py``): a Qwen2-0.5B-shaped model (494M parameters,
random weights, bf16), a BPE tokenizer trained locally the same way, 16 prompts x 8 samples =
128 samples per step, 256 completion tokens forced (``ignore_eos``), one optimizer step per
rollout, lr 1e-6, temperature 1, no KL term. Everything runs through slime's public API
(``slime_core.session.resolve`` + ``run_training``) with the ``local`` engine and the
``torch`` trainer on one GPU; ``bench_plugin.BenchPlugin`` forces the length and times each
phase after ``torch.cuda.synchronize()``.

Measured in the same process first: the bf16 matmul peak (8192^3, mean of 10 after 3 warm-ups)
and the device-to-device copy bandwidth (bytes read + written). Then per variant (a separate
process each): seconds per step, rollout tokens/s, training tokens/s, training MFU (model
FLOPs 6 N T + attention, over the train phase, against the measured peak) and the weight-sync
time against its memory-bound floor (each byte read once and written once at the measured
copy bandwidth).

    python bench/gpu_anchor.py --out results.json            # every variant
    python bench/gpu_anchor.py --variants graphs --steps 4

On an SGLang server (issue 42 item 3; ``bench/h200_sglang.sh run anchor`` on the device):
``sglang`` and ``sglang_disk`` launch one server (the ``sglang_rollout`` plugin) on a model
directory that the seeded weights are written to once (``save_anchor_model``), weights synced
as tensors or through a safetensors file; ``saved_local`` is the local engine on the same
directory, the training the same in all three. ``--sglang-set KEY=VALUE`` (repeatable) gives
the server's settings (``server_args``, ``env``, ``mem_fraction_static``, ``log_dir``, ...):

    python bench/gpu_anchor.py --variants saved_local,sglang --steps 10 \
        --sglang-set 'env={PYTHONPATH = "/opt/sglang-site"}' --sglang-set mem_fraction_static=0.3

``--smoke --variants sglang`` on a CPU needs a stand-in ``sglang.launch_server`` (see
plugins/sglang_rollout/tests/test_anchor_bench.py, which runs it).

Correctness of each variant's engine: the median ``train/mismatch_abs_logprob_diff`` (mean
|rollout log-prob - training log-prob| over the same tokens) is reported next to its speed, so
a decoding path that computes wrong log-probs shows up against ``eager``. ``--check-graphs``
also compares eager and graph decoding on the same seeded requests (rows with identical
tokens; in bf16 sampled rows drift apart after a few tokens, so few rows match). Needs CUDA
(``--smoke`` runs the plumbing on a CPU with a tiny model); prints one JSON line per
measurement and a table last.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_plugin import BenchPlugin, drop_checkpoints, plugin_selection, prompt_texts

QWEN2_05B = {
    "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "tie_word_embeddings": True, "eos_token_id": 2,
    "pad_token_id": 1,
}
# the second anchor (issue 24): a Qwen2.5-1.5B shape, 32 prompts x 8 samples, 1024 tokens forced
QWEN25_15B = {
    "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
    "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "tie_word_embeddings": True, "eos_token_id": 2,
    "pad_token_id": 1,
}
# shape name -> (model config, prompts, samples per prompt, completion tokens)
SHAPES: dict[str, tuple[dict[str, Any], int, int, int]] = {
    "0.5b": (QWEN2_05B, 16, 8, 256),
    "1.5b": (QWEN25_15B, 32, 8, 1024),
}
SHAPE = "0.5b"  # set by --shape
PROMPTS, GROUP, NEW = SHAPES[SHAPE][1:]
PROFILE_SCOPE = "all"  # set by --profile-scope
TRL_ANCHOR_S = 5.57  # median of TRL's steady steps 2-4 (anchors README; 0.5b shape only)

# name -> rollout / train (/ run) overrides
VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "eager": {"rollout": {"cuda_graphs": False}, "train": {"micro_batch_tokens": 8192}},
    "graphs": {"rollout": {"cuda_graphs": True}, "train": {"micro_batch_tokens": 8192}},
    "graphs_mb16k": {"rollout": {"cuda_graphs": True}, "train": {"micro_batch_tokens": 16384}},
    "compiled_mb16k": {"rollout": {"cuda_graphs": True, "compile_decode": True},
                       "train": {"micro_batch_tokens": 16384}},
    # the anchor as it ran before issue 24's kernels (transformers' decode step, SDPA decode
    # attention, the torch head functions), pinned so that it stays comparable
    "compiled_all_mb16k": {"rollout": {"cuda_graphs": True, "compile_decode": True,
                                       "fused_decoder": False, "decode_attention": "sdpa"},
                           "train": {"micro_batch_tokens": 16384, "compile": True,
                                     "head_kernel": "torch"}},
    # + the fused decode step (one q/k/v and one gate/up product a layer), the Triton decode
    # attention and the Triton head statistics: the defaults on CUDA since issue 24
    "fast_mb16k": {"rollout": {"cuda_graphs": True, "compile_decode": True,
                               "fused_decoder": True, "decode_attention": "triton"},
                   "train": {"micro_batch_tokens": 16384, "compile": True,
                             "head_kernel": "triton"}},
    # the same without train.compile (minutes less compile warm-up, e.g. for the 1.5b shape)
    "fast_eager_train_mb16k": {"rollout": {"cuda_graphs": True, "compile_decode": True,
                                           "fused_decoder": True, "decode_attention": "triton"},
                               "train": {"micro_batch_tokens": 16384, "head_kernel": "triton"}},
    # the megatron_backend plugin's trainer (TP=1) beside the torch trainer of compiled_mb16k:
    # same engine, same micro-batches, so the train phase compares the two backends
    "megatron_mb16k": {"rollout": {"cuda_graphs": True, "compile_decode": True},
                       "train": {"micro_batch_tokens": 16384, "backend": "megatron"}},
}
# every variant above ran with cuDNN attention and AdamW on the bf16 weights, the defaults
# until 2026-12-02: pinned so that each stays comparable with its recorded figures (the
# *_nocudnn variants turn cuDNN off; fast_mb16k_defaults has both of today's defaults)
for _overrides in VARIANTS.values():
    _overrides.setdefault("run", {})["cudnn_attention"] = True
    _overrides.setdefault("train", {})["master_weights"] = False
    # and the torch sampler (noise tensor; compiled with compile_decode) and the rotary
    # embedding and cache write as kernels of their own, until 2026-12-02
    _overrides.setdefault("rollout", {})["sample_kernel"] = "torch"
    _overrides["rollout"]["decode_fuse_rope"] = False
    # and inductor's kernels launched without programmatic dependent launch, until the fifth
    # session of 2026-12-02 (fast_mb16k_defaults_pdl is the defaults since)
    _overrides["rollout"]["compile_pdl"] = False
    # and the training forward eager, until train.cuda_graphs = "auto" (2026-12-06; the
    # *_graphs variants turn it on)
    _overrides["train"]["cuda_graphs"] = False


def _variant(base: str, **changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Variant ``base`` with keys of its sections changed (``run`` may be added)."""
    out = {section: dict(keys) for section, keys in VARIANTS[base].items()}
    for section, keys in changes.items():
        out.setdefault(section, {}).update(keys)
    return out


VARIANTS.update({
    # fast_eager_train_mb16k without any compile warm-up (CUDA graphs of the eager fused
    # step): the variant that surely finishes in a call at the 1.5b shape, whose compile
    # warm-up once ran > 190 s
    "graphs_fused_mb16k": _variant("fast_eager_train_mb16k", rollout={"compile_decode": False}),
    # without cuDNN attention (run.cudnn_attention = false): cuDNN builds a graph for every
    # new attention shape, the suspect of the slow step at rollout id 4 (the first batch of
    # 13-token prompts: new prefill and training shapes)
    "fast_mb16k_nocudnn": _variant("fast_mb16k", run={"cudnn_attention": False}),
    "fast_eager_train_mb16k_nocudnn": _variant("fast_eager_train_mb16k",
                                               run={"cudnn_attention": False}),
    # the decode attention as before its column splits (one program walks a row's cache),
    # beside fast_eager_train_mb16k's heuristic splits: the full step's A/B of the splits
    "fast_eager_train_mb16k_split1": _variant("fast_eager_train_mb16k",
                                              rollout={"decode_attention_splits": 1}),
    # the defaults since 2026-12-02: no cuDNN attention, fp32 master weights for AdamW, the
    # Triton sampler (rollout.sample_kernel; the profiled call of 2026-12-02's fourth session
    # ran this variant with the torch sampler); and rollout.decode_fuse_rope (a default since
    # the fifth session, after this variant's run in it). Without rollout.compile_pdl, which
    # became a default after it: fast_mb16k_defaults_pdl is the defaults now
    "fast_mb16k_defaults": _variant("fast_mb16k", run={"cudnn_attention": False},
                                    train={"master_weights": True},
                                    rollout={"sample_kernel": "auto", "decode_fuse_rope": True}),
})
VARIANTS.update({
    # the defaults without train.compile or a compiled decode step (CUDA graphs of the eager
    # fused step: a minute of warm-up, not four): A/Bs of the training options in one call
    "eager_defaults": _variant("graphs_fused_mb16k", run={"cudnn_attention": False},
                               train={"master_weights": True},
                               rollout={"sample_kernel": "auto", "decode_fuse_rope": True}),
})
VARIANTS.update({
    # A/Bs of the last changes in the compiled anchor: the rotary embedding and cache write
    # outside the attention kernel; the torch sampler
    "fast_mb16k_defaults_norope": _variant("fast_mb16k_defaults",
                                           rollout={"decode_fuse_rope": False}),
    "fast_mb16k_defaults_torch_sampler": _variant("fast_mb16k_defaults",
                                                  rollout={"sample_kernel": "torch"}),
    "eager_defaults_nomaster": _variant("eager_defaults", train={"master_weights": False}),
    # the compiled decode step's inductor options (2026-12-02, fifth session), first as
    # rollout A/Bs without train.compile (its warm-up is ~200 s of the ~220 s; the rollout
    # phase does not depend on it), then in the full anchor
    "rollout_defaults": _variant("fast_mb16k_defaults", train={"compile": False}),
    "rollout_pdl": _variant("fast_mb16k_defaults", train={"compile": False},
                            rollout={"compile_pdl": True}),
    "rollout_tuned": _variant("fast_mb16k_defaults", train={"compile": False},
                              rollout={"compile_pdl": True, "compile_autotune": True}),
    # the defaults since (rollout.compile_pdl on)
    "fast_mb16k_defaults_pdl": _variant("fast_mb16k_defaults", rollout={"compile_pdl": True}),
    "fast_mb16k_defaults_tuned": _variant("fast_mb16k_defaults",
                                          rollout={"compile_pdl": True,
                                                   "compile_autotune": True}),
    "eager_defaults_cudnn": _variant("eager_defaults", run={"cudnn_attention": True}),
})
VARIANTS.update({
    # issue 43: train.cuda_graphs (the training decoder replayed from CUDA graphs at 16-token
    # buckets) on the bf16 anchor, beside rollout_pdl (the same without them; both without
    # train.compile, which the graphs exclude): `--variants rollout_pdl,rollout_pdl_graphs`
    "rollout_pdl_graphs": _variant("rollout_pdl", train={"cuda_graphs": True}),
    # one-step-off on the one GPU: step k+1's decode on the engine's own stream beside step
    # k's training (with "tis", as docs/executors.md pairs them)
    "rollout_pdl_graphs_async": _variant("rollout_pdl", train={"cuda_graphs": True},
                                         run={"async_rollout": True},
                                         rollout={"engine_stream": True},
                                         algorithm={"is_correction": "tis"}),
    # one-step-off with the decode and the training on the one default stream (no
    # rollout.engine_stream): the host work overlaps, the kernels queue
    "rollout_pdl_graphs_async1": _variant("rollout_pdl", train={"cuda_graphs": True},
                                          run={"async_rollout": True},
                                          algorithm={"is_correction": "tis"}),
    # train.compile beside the graphs: each bucket's decoder compiled at its shape, then
    # captured (inductor's fused norms, activations and residual additions, replayed)
    "rollout_pdl_graphs_compiled": _variant("rollout_pdl",
                                            train={"cuda_graphs": True, "compile": True}),
    "rollout_pdl_graphs_compiled_async": _variant("rollout_pdl",
                                                  train={"cuda_graphs": True, "compile": True},
                                                  run={"async_rollout": True},
                                                  rollout={"engine_stream": True},
                                                  algorithm={"is_correction": "tis"}),
    # train.compile alone (in place, dynamic shapes) one-step-off
    "fast_mb16k_defaults_pdl_async": _variant("fast_mb16k_defaults_pdl",
                                              run={"async_rollout": True},
                                              rollout={"engine_stream": True},
                                              algorithm={"is_correction": "tis"}),
    # the same with cuDNN attention (the fastest backend at the training shapes standalone,
    # bench/sdpa_backends.py; the anchor's forced lengths give it few shapes to plan)
    "fast_mb16k_defaults_pdl_async_cudnn": _variant("fast_mb16k_defaults_pdl",
                                                    run={"async_rollout": True,
                                                         "cudnn_attention": True},
                                                    rollout={"engine_stream": True},
                                                    algorithm={"is_correction": "tis"}),
    # the same with the rollout's 128 rows trained in one micro-batch instead of three of
    # <= 16k tokens: fewer, larger products beside the decode
    "fast_mb48k_defaults_pdl_async": _variant("fast_mb16k_defaults_pdl",
                                              run={"async_rollout": True},
                                              train={"micro_batch_tokens": 49152},
                                              rollout={"engine_stream": True},
                                              algorithm={"is_correction": "tis"}),
    # the defaults (synchronous) with the rollout's 128 rows trained in one micro-batch
    "fast_mb48k_defaults_pdl": _variant("fast_mb16k_defaults_pdl",
                                        train={"micro_batch_tokens": 49152}),
    # the same A/B without any compile warm-up (beside eager_defaults)
    "eager_defaults_graphs": _variant("eager_defaults", train={"cuda_graphs": True}),
})
# issue 42 item 3: the anchor on an SGLang server beside the local engine. Both load the seeded
# model from one saved directory (``bench.saved_model``: ``model.path``, see save_anchor_model)
# because ``sglang.launch_server`` needs a directory, and both engines must start from the same
# weights for the log-prob mismatch and the tokens/s to compare. Both train as ``rollout_pdl``
# does (no train.compile: its ~200 s warm-up would not fit beside an SGLang start in one 600 s
# device call), so the two differ in the rollout engine (and its weight sync) only. The SGLang
# variants carry no local-engine keys (cuda_graphs, compile_decode, ...: the server has its own
# settings, given with --sglang-set).
_BASE = VARIANTS["rollout_pdl"]
VARIANTS.update({
    "saved_local": _variant("rollout_pdl", bench={"saved_model": True}),
    # tensors through /update_weights_from_tensor (CUDA IPC: the server is on this host)
    "sglang": {"run": dict(_BASE["run"]), "train": dict(_BASE["train"]),
               "rollout": {"engine": "sglang"}, "weights": {"transport": "inprocess"},
               "bench": {"saved_model": True}},
    # a safetensors file a sync, read by the server (/update_weights_from_disk)
    "sglang_disk": {"run": dict(_BASE["run"]), "train": dict(_BASE["train"]),
                    "rollout": {"engine": "sglang"}, "weights": {"transport": "disk"},
                    "bench": {"saved_model": True}},
})
# sections of a variant that are not slime config sections: read by the worker
BENCH_SECTION = "bench"
# run.seed of every variant: it seeds the init_config weights and the saved directory's
SEED = 1


def emit(log: Any, **kw: Any) -> None:
    line = json.dumps(kw)
    print(line, flush=True)
    if log is not None:
        log.write(line + "\n")
        log.flush()


# -- ceilings --------------------------------------------------------------------------------
def ceilings() -> dict[str, float]:
    import torch

    def timed(fn: Any, warm: int, reps: int) -> float:
        for _ in range(warm):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000 / reps

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = timed(lambda: torch.matmul(a, b), 3, 10)
    src = torch.randn(2**30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    dst = torch.empty_like(src)
    cp = timed(lambda: dst.copy_(src), 3, 10)
    a = b = src = dst = torch.empty(0)
    torch.cuda.empty_cache()
    return {"bf16_tflops": 2 * n**3 / mm / 1e12,
            "copy_bytes_per_s": 2 * 2**30 * 2 / cp}  # read + write


# -- inputs ----------------------------------------------------------------------------------
def write_inputs(work: Path) -> tuple[Path, Path]:
    """The anchor's tokenizer recipe (BPE, vocab 1000, trained here) and 512 prompts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok_dir = work / "tokenizer"
    if not (tok_dir / "tokenizer.json").exists():
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        text = [f"Question {i}: what is {i} plus {i * 7 % 13}? Answer: {i + i * 7 % 13}."
                for i in range(2000)]
        tok.train_from_iterator(text, trainers.BpeTrainer(
            vocab_size=1000, special_tokens=["<unk>", "<pad>", "<eos>"]))
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                eos_token="<eos>").save_pretrained(str(tok_dir))
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "label": "0"}) + "\n"
                               for p in prompt_texts(512)))
    return tok_dir, prompts


def anchor_model_config(smoke: bool) -> dict[str, Any]:
    """``model.init_config`` of the shape; ``smoke``: a tiny model of the same family."""
    model = dict(SHAPES[SHAPE][0])
    if smoke:  # plumbing check on a CPU: few parameters, the tokenizer's vocabulary
        model.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, vocab_size=1000)
    return model


def save_anchor_model(work: Path, smoke: bool, dtype: str | None = None) -> Path:
    """The seeded random anchor model as a model directory (config.json, safetensors, the
    anchor tokenizer's files), for engines that load a directory (``sglang.launch_server
    --model-path``) and for the trainer (``model.path``).

    The weights are built by the same function and seed as ``model.init_config`` builds them
    in the trainer and the local engine (fp32 on the CPU, then cast), saved in the run's dtype
    (bf16; fp32 in ``--smoke``), so a run from the directory starts from the weights a run from
    ``init_config`` starts from (``dtype`` other than the run's: for tests). The tokenizer
    files make the directory whole for a bare ``--model-path`` launch, but beside a qwen2
    ``config.json`` transformers 5 (5.19 here) loads them as ``Qwen2Tokenizer``, whose
    pre-tokenizer splits digits apart: other token ids than the anchor's tokenizer gives, so
    the variants also set ``model.tokenizer`` to the anchor's. Written once per work dir and shape (a marker file records
    what it holds; another config rewrites it); written beside and renamed, so a killed writer
    leaves no half directory behind."""
    import torch
    from slime_core.models.loading import load_causal_lm

    tok_dir, _ = write_inputs(work)
    model = anchor_model_config(smoke)
    dtype = dtype or ("float32" if smoke else "bfloat16")
    out = work / f"model_{SHAPE}{'_smoke' if smoke else ''}"
    marker = {"init_config": model, "seed": SEED, "dtype": dtype}
    if (out / "slime_anchor.json").exists() and \
            json.loads((out / "slime_anchor.json").read_text()) == marker:
        return out
    spec = argparse.Namespace(path="", init_config=model, trust_remote_code=False)
    lm: Any = load_causal_lm(spec, torch.device("cpu"), getattr(torch, dtype), seed=SEED)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=work))
    lm.save_pretrained(str(tmp), safe_serialization=True)
    for f in tok_dir.iterdir():
        shutil.copy(f, tmp / f.name)
    (tmp / "slime_anchor.json").write_text(json.dumps(marker))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def train_flops(tokens_per_sample: list[int], response_per_sample: list[int]) -> float:
    """Model FLOPs of one forward + backward: 6 N per token (N: every weight used in a matmul,
    the embedding lookup not counted) plus causal attention (QK^T and AV: 4 d_attn FLOPs per
    key forward, x3 with backward, half the keys on average), plus 6 V d for the tied LM head
    at the positions whose log-prob the loss needs (one per response token: no implementation
    needs logits at prompt positions; before 2026-11-30's fourth session the head was counted
    at every position, which read about 2% higher on this workload)."""
    c = SHAPES[SHAPE][0]
    d, inter, layers, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    head = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * head
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * inter  # q, k, v, o, gate/up/down
    flops = 0.0
    for t, r in zip(tokens_per_sample, response_per_sample, strict=True):
        flops += 6 * layers * per_layer * t + 6 * v * d * r + 3 * 4 * layers * d * t * t / 2
    return flops


# -- the CUDA-graph decode against the eager one (own process) ------------------------------
def check_graphs(work: Path, smoke: bool) -> dict[str, Any]:
    """Same seeded requests through an eager and a ``rollout.cuda_graphs`` engine (the 0.5B
    model, 128 rows x 64 tokens, twice so the second call replays the cached graph): share of
    rows with identical tokens, largest log-prob gap on those rows, time per call."""
    import time

    import torch
    from slime_core.testing import build_test_config
    from slime_hookspecs import SamplingParams
    from slime_std.accelerators.devices import TorchAccelerator
    from slime_std.engine.local_engine import LocalEngine

    tok_dir, _ = write_inputs(work)
    model = dict(QWEN2_05B)
    rows, new = (8, 8) if smoke else (128, 64)
    if smoke:
        model.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, vocab_size=1000)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in prompt_texts(rows)]
    params = [SamplingParams(temperature=1.0, max_new_tokens=new, ignore_eos=True, seed=7)] * rows
    accel = None if smoke else TorchAccelerator("cuda")
    out: dict[str, Any] = {}
    results = {}
    for name, graphs in [("eager", False), ("graphs", True)]:
        cfg = build_test_config(model={"init_config": model, "tokenizer": str(tok_dir),
                                       "dtype": "float32" if smoke else "bfloat16"},
                                rollout={"cuda_graphs": graphs})
        engine = LocalEngine(cfg, 0, accel)
        times = []
        for _ in range(2):
            if not smoke:
                torch.cuda.synchronize()
            t = time.perf_counter()
            results[name] = engine.generate(prompts, params)
            if not smoke:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        out[f"{name}_s"] = times
        engine.shutdown()
    same = [a.token_ids == b.token_ids for a, b in zip(results["eager"], results["graphs"],
                                                       strict=True)]
    gaps = [max(abs(x - y) for x, y in zip(a.log_probs, b.log_probs, strict=True))
            for a, b, ok in zip(results["eager"], results["graphs"], same, strict=True) if ok]
    first = [a.token_ids[0] == b.token_ids[0]
             for a, b in zip(results["eager"], results["graphs"], strict=True)]
    out.update(rows=rows, new_tokens=new, same_rows=sum(same), same_first_token=sum(first),
               max_logprob_gap_same_rows=max(gaps) if gaps else None,
               all_lengths_ok=all(len(o.token_ids) == new for o in results["graphs"]))
    return out


# -- one variant (own process) ---------------------------------------------------------------
def is_sglang(variant: str) -> bool:
    return VARIANTS[variant]["rollout"].get("engine") == "sglang"


def variant_data(variant: str, work: Path, run_dir: Path, num_rollouts: int,
                 smoke: bool) -> dict[str, Any]:
    """The config tables of one variant's run (before ``--sglang-set`` overrides)."""
    tok_dir, prompts = write_inputs(work)
    over = VARIANTS[variant]
    dtype = "float32" if smoke else "bfloat16"
    if over.get(BENCH_SECTION, {}).get("saved_model"):
        # model.tokenizer still names the anchor's tokenizer (the server gets it as
        # --tokenizer-path): the copy in the directory loads as another tokenizer (see
        # save_anchor_model), which would change the prompts' tokens
        model_table: dict[str, Any] = {"path": str(save_anchor_model(work, smoke)),
                                       "tokenizer": str(tok_dir), "dtype": dtype}
    else:
        model_table = {"init_config": anchor_model_config(smoke), "tokenizer": str(tok_dir),
                       "dtype": dtype}
    data: dict[str, Any] = {
        "run": {"num_rollouts": num_rollouts,
                "run_dir": str(run_dir), "progress": False, "loggers": ["jsonl"], "seed": SEED,
                # no final checkpoint: 7 GB for the 0.5B anchor (fp32 master weights and AdamW
                # moments) that nobody reads, 20 s or more of a device call a variant
                "save_at_end": False, **over.get("run", {})},
        "model": model_table,
        "data": {"path": str(prompts)},
        "rollout": {"batch_size": 2 if smoke else PROMPTS, "n_samples_per_prompt": GROUP,
                    "max_new_tokens": 8 if smoke else NEW,
                    "temperature": 1.0, "top_p": 1.0, "top_k": -1, **over["rollout"]},
        "train": {"lr": 1e-6, "grad_clip": 1.0, **over["train"]},
        "algorithm": {"advantage_estimator": "grpo", "policy_loss": "ppo", "eps_clip": 0.2,
                      **over.get("algorithm", {})},
    }
    for section, keys in over.items():  # e.g. weights.transport of the SGLang variants
        if section not in data and section != BENCH_SECTION:
            data[section] = dict(keys)
    if smoke:  # no GPU: the kernels fall back to their torch forms
        data["train"]["head_kernel"] = "auto"
    return data


def worker(variant: str, work: Path, steps: int, warmup: int, smoke: bool,
           profile_dir: str | None = None,
           profile_steps: tuple[int, int] | None = None,
           sglang_set: tuple[str, ...] = ()) -> dict[str, Any]:
    """One variant's run; ``sglang_set`` (``KEY=VALUE``, core run's ``-o`` syntax) become
    ``sglang.KEY=VALUE`` overrides of the SGLang variants (the device script's server
    arguments, its environment, the log folder)."""
    import torch
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    run_dir = Path(tempfile.mkdtemp(prefix=f"slime-gpu-{variant}-")) / "run"
    data = variant_data(variant, work, run_dir, warmup + steps + (
        2 if extra_profiled(profile_dir, profile_steps) else 0), smoke)
    if profile_dir:  # two more steps under the torch profiler, not timed: from the first's
        # training to the second's, so the second's rollout and weight sync are in it
        last = warmup + steps
        first_last = list(profile_steps) if profile_steps else [last, last + 1]
        data["profile"] = {"steps": first_last, "scope": PROFILE_SCOPE, "row_limit": 80,
                           "sort_by": "self_cpu_time_total" if smoke else "self_cuda_time_total"}
    manager, config = resolve(plugin_selection(variant_plugins(variant)), None,
                              sglang_overrides(variant, sglang_set), data)
    bench = BenchPlugin(cuda=not smoke)
    manager.register_object(bench, "bench_gpu_anchor")
    if not smoke:
        torch.cuda.reset_peak_memory_stats()
    run_training(manager, config)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    drop_checkpoints(run_dir)
    if profile_dir:
        for table in (run_dir / "profile").glob("*.txt"):
            shutil.copy(table, Path(profile_dir) / f"profile_{variant}.txt")
        if profile_steps:  # the timeline too, to compare the profiled steps phase by phase
            for trace in (run_dir / "profile").glob("*.json"):
                with open(trace, "rb") as src, gzip.open(
                        Path(profile_dir) / f"trace_{variant}.json.gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)
    # per-sample token counts of the last step (all steps have the same shape up to prompt length)
    return {
        "variant": variant, "engine": config.rollout.engine,
        "walls": bench.step_walls(), "phases": bench.phases,
        "gc_s": bench.phase_gc, "gc_full": bench.phase_gc2, "cuda_alloc": bench.phase_cuda_alloc,
        "train_tokens": bench.train_tokens, "response_tokens": bench.response_tokens,
        "sync_bytes": [r.get("perf/weight_sync_bytes") for r in rows],
        "metrics_step_time": [r.get("perf/step_time") for r in rows],
        # rollout vs training log-probs of the same tokens: the engine's correctness check
        "mismatch": [r.get("train/mismatch_abs_logprob_diff") for r in rows],
        "peak_mem_gb": 0.0 if smoke else torch.cuda.max_memory_allocated() / 2**30,
        "samples": (2 if smoke else PROMPTS) * GROUP,
        "profiled_steps": 2 if extra_profiled(profile_dir, profile_steps) else 0,
    }


def variant_plugins(variant: str) -> tuple[str, ...]:
    """Plugins a variant needs beside slime_grpo and the defaults."""
    over = VARIANTS[variant]
    extra = ("megatron_backend",) if over["train"].get("backend") == "megatron" else ()
    return extra + (("sglang_rollout",) if is_sglang(variant) else ())


def sglang_overrides(variant: str, sglang_set: tuple[str, ...] | list[str]) -> list[str]:
    """``sglang.KEY=VALUE`` for an SGLang variant; none for the others (their runs have no
    ``[sglang]`` section: the plugin is not loaded)."""
    if not is_sglang(variant):
        return []
    for item in sglang_set:
        if "=" not in item:
            raise SystemExit(f"--sglang-set takes KEY=VALUE (TOML value); got {item!r}")
    return [f"sglang.{item}" for item in sglang_set]


def extra_profiled(profile_dir: str | None, profile_steps: tuple[int, int] | None) -> bool:
    """Two extra, untimed steps are profiled unless ``--profile-steps`` names timed ones."""
    return bool(profile_dir) and not profile_steps


def summarize(res: dict[str, Any], peak: dict[str, float], warmup: int) -> dict[str, Any]:
    sl = slice(warmup, len(res["walls"]) - res.get("profiled_steps", 0))
    med = statistics.median
    walls = res["walls"][sl]
    roll = res["phases"]["rollout"][sl]
    train = res["phases"]["train"][sl]
    sync = res["phases"]["weight_sync"][1:][sl]  # [0] is the initial sync
    tokens = res["train_tokens"][sl]
    resp = res["response_tokens"][sl]
    n = res["samples"]
    flops = [train_flops([int(round(t / n))] * n, [int(round(r / n))] * n)
             for t, r in zip(tokens, resp, strict=True)]
    mfu = [f / t / (peak["bf16_tflops"] * 1e12) for f, t in zip(flops, train, strict=True)]
    sync_bytes = float(res["sync_bytes"][-1] or 0)
    bound = 2 * sync_bytes / peak["copy_bytes_per_s"]
    return {
        "variant": res["variant"], "engine": res.get("engine", "local"),
        "s_per_step": med(walls), "steps": walls,
        "rollout_s": med(roll), "rollout_tok_per_s": med(r / t for r, t in zip(resp, roll, strict=True)),
        "train_s": med(train), "train_tok_per_s": med(k / t for k, t in zip(tokens, train, strict=True)),
        "train_tflops": med(f / t / 1e12 for f, t in zip(flops, train, strict=True)), "train_mfu": med(mfu),
        "sync_s": med(sync), "sync_share_of_step": med(sync) / med(walls),
        "sync_bytes": sync_bytes, "sync_bound_s": bound,
        # TRL's constant is the 0.5b shape's; other shapes take TRL's trl_step rows of the same call
        "vs_trl": TRL_ANCHOR_S / med(walls) if SHAPE == "0.5b" else None, "peak_mem_gb": res["peak_mem_gb"],
        "mismatch": med(m for m in res.get("mismatch", [])[warmup:] if m is not None)
        if any(m is not None for m in res.get("mismatch", [])) else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default=",".join(n for n in VARIANTS if not is_sglang(n)),
                    help="comma-separated (default: every variant but the SGLang ones, which "
                    "need SGLang and its settings)")
    ap.add_argument("--check-graphs", action="store_true",
                    help="first compare eager and graph decoding on the same seeded requests")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per variant")
    ap.add_argument("--warmup", type=int, default=2, help="discarded steps per variant")
    ap.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "slime-gpu-bench"))
    ap.add_argument("--out", help="JSON lines of every measurement")
    ap.add_argument("--profile-dir", help="profile two extra steps per variant (torch profiler, "
                    "training, weight sync, rollout, training; not timed); the key_averages "
                    "table lands here")
    ap.add_argument("--profile-steps", help="with --profile-dir: profile rollouts A,B "
                    "(inclusive, e.g. 3,4: the slow step 4 beside step 3) instead of two extra "
                    "ones; their timings then include the profiler's cost. The Chrome trace "
                    "comes back gzipped beside the table")
    ap.add_argument("--profile-scope", default="all", choices=["all", "train"],
                    help="with --profile-dir: profile.scope (train: the training phases only)")
    ap.add_argument("--stderr-dir", help="keep each worker's stderr here (e.g. with "
                    "TORCH_LOGS=recompiles)")
    ap.add_argument("--shape", default="0.5b", choices=sorted(SHAPES),
                    help="0.5b: the anchor (16 x 8 samples, 256 tokens); 1.5b: a Qwen2.5-1.5B "
                    "shape, 32 x 8 samples, 1024 tokens")
    ap.add_argument("--new-tokens", type=int,
                    help="completion tokens instead of the shape's (e.g. a 1.5b profile that "
                    "fits one device call: the profiler over 2 x 1,024 decode steps did not)")
    ap.add_argument("--sglang-set", action="append", default=[], metavar="KEY=VALUE",
                    help="for the SGLang variants (sglang, sglang_disk): sglang.KEY=VALUE, "
                    "VALUE in TOML as core run's -o takes it, e.g. 'mem_fraction_static=0.3' or "
                    "'env={PYTHONPATH = \"/tmp/sgl/site\"}' (repeatable)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true",
                    help="plumbing check without a GPU: tiny model on the CPU, no ceilings")
    a = ap.parse_args()
    global SHAPE, PROMPTS, GROUP, NEW, PROFILE_SCOPE
    SHAPE = a.shape
    PROFILE_SCOPE = a.profile_scope
    PROMPTS, GROUP, NEW = SHAPES[SHAPE][1:]
    NEW = a.new_tokens or NEW
    work = Path(a.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    if a.worker == "check_graphs":
        print("RESULT " + json.dumps(check_graphs(work, a.smoke)), flush=True)
        return
    if a.worker:
        # SLIME_BENCH_DUMP_AFTER=S: every thread's stack to stderr after S seconds, then exit
        # (what a hung variant was doing; the parent reports the worker's stderr)
        if os.environ.get("SLIME_BENCH_DUMP_AFTER"):
            import faulthandler

            faulthandler.dump_traceback_later(float(os.environ["SLIME_BENCH_DUMP_AFTER"]),
                                              exit=True)
        # SLIME_BENCH_SWITCH_INTERVAL=S: the interpreter's thread switch interval (5 ms by
        # default): how long a one-step-off decode thread may wait for the GIL while the
        # training thread runs Python
        if os.environ.get("SLIME_BENCH_SWITCH_INTERVAL"):
            sys.setswitchinterval(float(os.environ["SLIME_BENCH_SWITCH_INTERVAL"]))
        steps = tuple(int(x) for x in a.profile_steps.split(",")) if a.profile_steps else None
        if steps is not None and len(steps) != 2:
            raise SystemExit(f"--profile-steps takes two rollout ids A,B; got {a.profile_steps!r}")
        print("RESULT " + json.dumps(worker(a.worker, work, a.steps, a.warmup, a.smoke,
                                            a.profile_dir, steps, tuple(a.sglang_set))),
              flush=True)
        return
    names = a.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    log = open(a.out, "a") if a.out else None  # noqa: SIM115 - closed at exit
    import torch

    gpu = "cpu (smoke)" if a.smoke else torch.cuda.get_device_name()
    emit(log, what="device", gpu=gpu, torch=torch.__version__, shape=a.shape, new_tokens=NEW,
         transformers=__import__("transformers").__version__)
    peak = {"bf16_tflops": 1.0, "copy_bytes_per_s": 1e10} if a.smoke else ceilings()
    emit(log, what="ceilings", **peak)
    write_inputs(work)
    if any(VARIANTS[n].get(BENCH_SECTION, {}).get("saved_model") for n in names):
        # once, before the variants: its writing is no variant's time
        emit(log, what="saved_model", path=str(save_anchor_model(work, a.smoke)))
    table = []
    for name in (["check_graphs"] if a.check_graphs else []) + names:
        cmd = [sys.executable, __file__, "--worker", name, "--work-dir", str(work),
               "--steps", str(a.steps), "--warmup", str(a.warmup), "--shape", a.shape,
               "--new-tokens", str(NEW)] + (["--smoke"] if a.smoke else [])
        cmd += [f"--sglang-set={item}" for item in a.sglang_set]
        if a.profile_dir:
            os.makedirs(a.profile_dir, exist_ok=True)
            cmd += ["--profile-dir", a.profile_dir]
            if a.profile_steps:
                cmd += ["--profile-steps", a.profile_steps]
            cmd += ["--profile-scope", a.profile_scope]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if a.stderr_dir:
            os.makedirs(a.stderr_dir, exist_ok=True)
            Path(a.stderr_dir, f"worker_{name}.log").write_text(proc.stderr)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            emit(log, what="variant_failed", variant=name, rc=proc.returncode,
                 stderr=proc.stderr[-6000:])
            continue
        res = json.loads(lines[-1][len("RESULT "):])
        if name == "check_graphs":
            emit(log, what="check_graphs", **res)
            continue
        emit(log, what="variant_raw", **res)
        s = summarize(res, peak, a.warmup)
        emit(log, what="variant", **s)
        table.append(s)
    print(f"\npeak bf16 {peak['bf16_tflops']:.0f} TFLOP/s, copy {peak['copy_bytes_per_s'] / 1e12:.2f} TB/s;"
          f" TRL anchor {TRL_ANCHOR_S} s/step")
    print("variant        s/step  rollout_s  rollout_tok/s  train_s  train_tok/s  MFU    sync_ms"
          "  sync_bound_ms  sync/step  xTRL  |dlogp|")
    for s in table:
        xtrl = "-" if s["vs_trl"] is None else f"{s['vs_trl']:.1f}"
        print(f"{s['variant']:13s} {s['s_per_step']:6.3f}  {s['rollout_s']:8.3f}  "
              f"{s['rollout_tok_per_s']:12.0f}  {s['train_s']:7.3f}  {s['train_tok_per_s']:10.0f}"
              f"  {s['train_mfu']:5.1%}  {s['sync_s'] * 1e3:7.2f}  {s['sync_bound_s'] * 1e3:12.3f}"
              f"  {s['sync_share_of_step']:8.2%}  {xtrl:>4s}  {s['mismatch'] or 0:.4f}")


if __name__ == "__main__":
    main()
