"""``train.cuda_graphs`` on a GPU: the graphed decoder's gradients against the eager forward's,
and a micro-batch's forward + backward timed both ways, alternating, in one process.

The CPU tests check the bucketing and the gradient bookkeeping with a stand-in capture
(``core/tests/trainkit/test_graphed_decoder.py``); the capture itself
(:func:`slime_core.trainkit.graphed_decoder.capture_accumulating` over transformers'
decoder) runs only here.
The batch is the SmolLM2 example's shape: 16 prompts x 8 samples, prompts of 40-60 tokens,
responses of 8-32 tokens.

    python bench/train_graphs.py --model examples/smollm2/model --reps 20
    python bench/train_graphs.py --tiny     # a random 2-layer Llama (plumbing; any device)
    python bench/train_graphs.py --shared-prefix --matmul-precision high   # the two passes, TF32
    python bench/train_graphs.py --tiny --dtype bfloat16 --compile   # each bucket compiled first
    python bench/train_graphs.py --tiny --dtype bfloat16 --attention-ops  # SDPA backend per path
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator

import torch


def _model(path: str | None, tiny: bool, dtype: torch.dtype, device: str) -> torch.nn.Module:
    import transformers

    if tiny or not path:
        config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, tie_word_embeddings=True)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(path)
    from slime_core.api import fuse_rms_norms

    fuse_rms_norms(model)
    return model.to(device=device, dtype=dtype).train()


def _batch(vocab: int, seed: int) -> tuple[list[torch.Tensor], list[int]]:
    g = torch.Generator().manual_seed(seed)
    tokens, resp = [], []
    for _ in range(16):
        prompt = torch.randint(1, vocab, (int(torch.randint(40, 61, (1,), generator=g)),),
                               generator=g)
        for _ in range(8):
            r = int(torch.randint(8, 33, (1,), generator=g))
            tokens.append(torch.cat((prompt, torch.randint(1, vocab, (r,), generator=g))))
            resp.append(r)
    return tokens, resp


@contextlib.contextmanager
def _ops(out: dict[str, list[str]], name: str, on: bool) -> Iterator[None]:
    """With ``on``, ``out[name]``: the attention operators run inside (torch's profiler)."""
    if not on:
        yield
        return
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        yield
    out[name] = sorted({e.name[:70] for e in prof.events() if "attention" in e.name.lower()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="examples/smollm2/model")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shared-prefix", action="store_true",
                    help="the shared-prefix forward both ways (two passes, graphed or eager)")
    ap.add_argument("--matmul-precision", default="highest", help="high: TF32 products")
    ap.add_argument("--attention-ops", action="store_true",
                    help="name the attention operators of the first eager and the first graphed "
                         "(capturing) step: which SDPA backend each path takes")
    ap.add_argument("--compile", action="store_true",
                    help="each bucket's decoder compiled at its shape before its capture "
                         "(train.compile beside train.cuda_graphs)")
    a = ap.parse_args()
    torch.set_float32_matmul_precision(a.matmul_precision)
    from slime_core.api import GraphedDecoder, response_log_probs
    from slime_core.testing import static_buffer_graphs

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, a.dtype)
    model = _model(a.model, a.tiny, dtype, device)
    vocab = model.config.vocab_size
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    # off a GPU the stand-in capture (replay's buffers, no graphs): a plumbing check
    maker = None if device == "cuda" else static_buffer_graphs
    compiler = None
    if a.compile:  # what the trainer's train.compile gives the graphs; aot_eager off a GPU
        def compiler(m: torch.nn.Module) -> torch.nn.Module:
            backend = "inductor" if device == "cuda" else "aot_eager"
            return torch.compile(m, dynamic=False, backend=backend)  # type: ignore[return-value]
    graphed = GraphedDecoder(model.model, 0, make_graphed=maker, compiler=compiler)
    params = [p for p in model.parameters() if p.requires_grad]

    def step(tokens: list[torch.Tensor], resp: list[int], use: bool) -> torch.Tensor:
        # the same gradient tensors both ways (a captured backward adds into the ones it was
        # captured with); the eager backward adds into them too
        graphed.zero_grads(model)
        lps, ents = response_log_probs(model, tokens, resp, 1.0, 0, with_entropy=True,
                                       fused_head=True, shared_prefix=a.shared_prefix,
                                       decoder=graphed if use else None)
        loss = sum((lp * (i % 7 - 3)).sum() for i, lp in enumerate(lps)) / 1000
        loss = loss + 0.01 * sum(e.sum() for e in ents) / 1000
        loss.backward()
        return loss.detach()

    # the gradients, eager against graphed, on two batches (the second replays the first's graph
    # when its bucket is the same)
    worst = 0.0
    ops: dict[str, list[str]] = {}
    for seed in (0, 1):
        tokens, resp = _batch(vocab, seed)
        with _ops(ops, "eager", a.attention_ops and seed == 0):
            want_loss = step(tokens, resp, False)
        want = [p.grad.detach().clone() for p in params]
        t0 = time.perf_counter()
        with _ops(ops, "graphed", a.attention_ops and seed == 0):
            got_loss = step(tokens, resp, True)
        sync()
        first = time.perf_counter() - t0
        for p, w in zip(params, want, strict=True):
            scale = float(w.abs().max()) or 1.0
            worst = max(worst, float((p.grad - w).abs().max()) / scale)
        print(json.dumps({"what": "check", "seed": seed, "loss_eager": float(want_loss),
                          "loss_graphed": float(got_loss), "first_call_s": round(first, 3),
                          "buckets": graphed.buckets}), flush=True)
    if ops:
        print(json.dumps({"what": "attention_ops", **ops}), flush=True)
    # timing: alternating, same batches
    times: dict[str, list[float]] = {"eager": [], "graphed": []}
    batches = [_batch(vocab, 10 + i) for i in range(4)]
    for i in range(a.reps):
        tokens, resp = batches[i % len(batches)]
        for name in ("eager", "graphed"):
            sync()
            t0 = time.perf_counter()
            step(tokens, resp, name == "graphed")
            sync()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v[2:] or v) for k, v in times.items()}
    print(json.dumps({"what": "result", "device": torch.cuda.get_device_name() if device == "cuda"
                      else "cpu", "dtype": a.dtype, "shared_prefix": a.shared_prefix,
                      "matmul_precision": a.matmul_precision, "compile": a.compile,
                      "grad_max_rel_diff": worst,
                      "eager_s": med["eager"], "graphed_s": med["graphed"],
                      "graphed_over_eager": med["graphed"] / med["eager"],
                      "buckets": graphed.buckets, "eager_calls": graphed.eager_calls}), flush=True)


if __name__ == "__main__":
    main()
