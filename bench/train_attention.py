"""The training forward + backward of one right-padded micro-batch with and without the
padding mask, in one process (``slime_core.trainkit.batching``'s fused-head path stopped
passing the mask on 2026-12-02: under the causal mask right padding is never attended, and
without a mask SDPA may use its flash kernel). The anchor's shape by default (Qwen2-0.5B,
random weights, bf16, 43 rows of 267-269 tokens, cuDNN attention off as the default); prints
milliseconds (median of ``--reps``) and the largest difference of the hidden states at the
real positions.

    python bench/train_attention.py [--shape 0.5b|1.5b]
    python bench/train_attention.py --compile   # the body compiled (dynamic=False)

``causal`` rows: the same forward inside
:func:`slime_core.trainkit.causal_attention.causal_attention` (what the fused-head training
forward does since the eleventh session of 2026-12-07): SDPA
called causally with the grouped key/value heads, no mask built, also under ``--compile``
(where transformers builds a mask and repeats the heads).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

SHAPES = {  # model config, rows, length range
    "0.5b": (dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2), 43, (267, 269)),
    "1.5b": (dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2), 15, (1035, 1040)),
}


def main() -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="0.5b", choices=sorted(SHAPES))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--compile", action="store_true", help="the model body torch.compile'd")
    a = ap.parse_args()
    from slime_core.trainkit.causal_attention import causal_attention
    torch.backends.cuda.enable_cudnn_sdp(False)  # run.cudnn_attention's default
    shape, rows, (lo, hi) = SHAPES[a.shape]
    cfg = Qwen2Config(vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True,
                      attn_implementation="sdpa", **shape)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16)
    lengths = [lo + i % (hi - lo + 1) for i in range(rows)]
    width = max(lengths)
    ids = torch.randint(3, 151936, (rows, width), device="cuda")
    mask = torch.zeros(rows, width, dtype=torch.long, device="cuda")
    for r, n in enumerate(lengths):
        mask[r, :n] = 1
    real = mask.bool()

    body = torch.compile(model.model, dynamic=False) if a.compile else model.model

    def step(with_mask: bool, causal: bool = False) -> torch.Tensor:
        with causal_attention(model.model) if causal else torch.enable_grad():
            hidden = body(input_ids=ids, attention_mask=mask if with_mask else None,
                          use_cache=False)[0]
        hidden[real].float().pow(2).mean().backward()
        return hidden.detach()

    out = {}
    rows = (("masked", True, False), ("unmasked", False, False), ("causal", False, True),
            ("masked_again", True, False), ("unmasked_again", False, False),
            ("causal_again", False, True))
    if a.compile:  # two compilations, not three: the masked forward is not the trainer's
        rows = tuple(r for r in rows if not r[1])
    for name, with_mask, causal in rows:
        step(with_mask, causal)
        times = []
        for _ in range(a.reps):
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            t = time.perf_counter()
            step(with_mask, causal)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        out[f"{name}_ms"] = statistics.median(times) * 1e3
    with torch.no_grad():
        a_h = model.model(input_ids=ids, attention_mask=mask, use_cache=False)[0][real].float()
        b_h = model.model(input_ids=ids, use_cache=False)[0][real].float()
        with causal_attention(model.model):
            c_h = body(input_ids=ids, use_cache=False)[0][real].float()
    print(json.dumps({"what": "train_attention", "shape": a.shape, "rows": rows, "width": width,
                      "compile": a.compile, **out,
                      "max_abs_hidden_diff": float((a_h - b_h).abs().max()),
                      "causal_max_abs_hidden_diff": float((c_h - b_h).abs().max()),
                      "mean_abs_hidden": float(a_h.abs().mean())}), flush=True)


if __name__ == "__main__":
    main()
