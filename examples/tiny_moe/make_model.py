"""Build the tiny_moe policy: the tiny_arith Llama upcycled into a 4-expert, top-2 Mixtral.

    python examples/tiny_moe/make_model.py      # writes examples/tiny_moe/model/ (seconds, CPU)

Sparse upcycling (Komatsuzaki et al., 2022), no training: every layer's dense SiLU MLP becomes
``EXPERTS`` experts, each a copy of it with its weights scaled elementwise by ``1 + NOISE * z``
(z standard normal, one draw per expert), and a router ``[EXPERTS, hidden]`` drawn from
N(0, ROUTER_STD^2). Attention, norms and the tied embedding are copied unchanged. Mixtral's
gate weights of the top-2 experts sum to one, so with identical experts the upcycled model
would compute the dense one exactly; the noise makes the experts differ, so which two a token
is routed to changes its log-probs a little (what routing replay is about) while the model
keeps the dense model's warm start (the off-by-one slip of examples/tiny_arith, README).

Mixtral is the Llama decoder with MoE MLPs (no q/k norms, unlike Qwen3-MoE), which is what
makes the exact upcycling possible. Prints the start accuracy (tiny_arith's metric: greedy
completions of the 200 eval prompts) and writes model/upcycle_report.json. Deterministic
(seed SEED, CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

HERE = Path(__file__).resolve().parent
DENSE = HERE.parent / "tiny_arith" / "model"
EXPERTS, TOP_K = 4, 2
NOISE = 0.1  # relative spread of each expert's weights around the dense MLP's
ROUTER_STD = 0.1
SEED = 0


def upcycle(dense: LlamaForCausalLM, seed: int = SEED, noise: float = NOISE) -> MixtralForCausalLM:
    """The Mixtral of the module docstring, built from ``dense``'s weights (``noise``: the
    experts' relative spread, NOISE for the example)."""
    d = dense.config
    config = MixtralConfig(
        vocab_size=d.vocab_size, hidden_size=d.hidden_size, intermediate_size=d.intermediate_size,
        num_hidden_layers=d.num_hidden_layers, num_attention_heads=d.num_attention_heads,
        num_key_value_heads=d.num_key_value_heads, head_dim=d.head_dim,
        max_position_embeddings=d.max_position_embeddings, rms_norm_eps=d.rms_norm_eps,
        rope_parameters=dict(d.rope_parameters), tie_word_embeddings=True,
        num_local_experts=EXPERTS, num_experts_per_tok=TOP_K, sliding_window=None,
        router_jitter_noise=0.0, bos_token_id=d.bos_token_id, eos_token_id=d.eos_token_id,
        pad_token_id=d.pad_token_id,
    )
    gen = torch.Generator().manual_seed(seed)
    moe = MixtralForCausalLM(config)
    state = dense.state_dict()
    out = {}
    for name, value in state.items():
        if ".mlp." not in name:
            out[name] = value
    for i in range(d.num_hidden_layers):
        p = f"model.layers.{i}.mlp."
        gate_up = torch.cat([state[p + "gate_proj.weight"], state[p + "up_proj.weight"]])
        down = state[p + "down_proj.weight"]
        out[p + "experts.gate_up_proj"] = torch.stack(
            [gate_up * (1 + noise * torch.randn(gate_up.shape, generator=gen))
             for _ in range(EXPERTS)])
        out[p + "experts.down_proj"] = torch.stack(
            [down * (1 + noise * torch.randn(down.shape, generator=gen)) for _ in range(EXPERTS)])
        out[p + "gate.weight"] = ROUTER_STD * torch.randn(EXPERTS, d.hidden_size, generator=gen)
    missing, unexpected = moe.load_state_dict(out, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    moe.tie_weights()
    moe.generation_config = dense.generation_config
    return moe.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "model"))
    ap.add_argument("--noise", type=float, default=NOISE,
                    help="the experts' relative spread (bench/moe_routing_replay.py --noise)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    spec = importlib.util.spec_from_file_location("tiny_arith_make", HERE.parent / "tiny_arith" / "make_model.py")
    assert spec is not None and spec.loader is not None
    arith = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(arith)
    tok = AutoTokenizer.from_pretrained(str(DENSE))
    dense = LlamaForCausalLM.from_pretrained(str(DENSE), dtype=torch.float32).eval()
    moe = upcycle(dense, noise=args.noise)
    rows = arith.load_jsonl(HERE.parent / "tiny_arith" / "eval.jsonl")
    t0 = time.time()
    report = {"dense": arith.evaluate(dense, tok, rows), "moe": arith.evaluate(moe, tok, rows),
              "experts": EXPERTS, "top_k": TOP_K, "noise": args.noise, "router_std": ROUTER_STD,
              "seed": SEED,
              "parameters": sum(p.numel() for p in moe.parameters()),
              "active_parameters_per_token": sum(
                  p.numel() * (TOP_K / EXPERTS if "experts" in n else 1)
                  for n, p in moe.named_parameters())}
    print(json.dumps(report, indent=1), f"({time.time() - t0:.0f}s)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    moe.save_pretrained(str(out))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DENSE / f, out / f)
    (out / "upcycle_report.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
