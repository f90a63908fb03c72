"""LoRA against full fine-tuning on the SmolLM2 example, and against TRL's GRPOTrainer with a
peft ``LoraConfig``: held-out accuracy against wall-clock time, peak memory, s/step, optimizer
state and bytes per weight sync, each run in a fresh process of its own (issue 39, item 6).

    python bench/smollm2_lora.py --out /tmp/lora-bench                    # the GPU workload
    python bench/smollm2_lora.py --shape qwen2.5-1.5b --steps 5 --out /tmp/lora-shape
    python bench/smollm2_lora.py --prompts 2 --group 4 --steps 2 --new 8 \\
        --eval-interval 1 --eval-prompts 8 --out /tmp/plumbing             # a CPU plumbing check
    python bench/smollm2_lora.py --shape tiny --frameworks slime_full,slime_lora \\
        --prompts 2 --group 4 --steps 2 --new 8 --out /tmp/plumbing-shape  # the same, --shape

Frameworks (``--frameworks``, comma-separated): ``slime_full`` (every weight, ``--lr``),
``slime_lora`` (``--plugins slime_grpo,slime_lora``, ``--lora-lr``), ``trl_lora``
(``GRPOTrainer(peft_config=LoraConfig(...))`` of the same rank, alpha, targets and learning
rate) and ``trl_full``. Everything else is the workload of ``bench/smollm2_vs_trl.py``
(same prompts, reward, sampling, optimizer, clock; see its docstring), whose two runners
this script calls.

``--shape qwen2.5-1.5b`` / ``qwen2.5-7b``: the memory a user saves on a larger model. Random
weights of that shape (SmolLM2's tokenizer and vocabulary), bf16, no evaluation (the rewards
mean nothing); full against LoRA, peak memory and s/step over ``--steps`` steps. TRL is not
run in this mode.

Printed and written to ``--out/summary.json``: each curve, each run's peak memory (slime:
``perf/peak_memory_gb``, the trainer device's ``max_memory_allocated``, the colocated engine
included; TRL: ``torch.cuda.max_memory_allocated``), median s/step (slime:
``perf/step_time``, rollout + train + sync; TRL: generation + update, from its step
callbacks), optimizer state (MiB), and the time each curve first reaches the lowest of the
best accuracies and step 0 + 0.15.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import smollm2_vs_trl as workload  # noqa: E402

PRESETS = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "attention_mlp": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                      "down_proj"],
}
# Qwen2.5 decoder shapes (config.json of the released models), SmolLM2's vocabulary so its
# tokenizer works; tied embeddings as the 1.5B (the 7B unties them)
SHAPES = {
    "qwen2.5-1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2,
                     "tie_word_embeddings": True},
    # the plumbing check of --shape on a CPU
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2.5-7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                   "num_attention_heads": 28, "num_key_value_heads": 4,
                   "tie_word_embeddings": False},
}


def _toml_table(d: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items()) + "}"


def shape_overrides(a: argparse.Namespace) -> tuple[str, ...]:
    """``-o`` overrides that swap the model for random weights of ``a.shape`` in bf16."""
    if not a.shape:
        return ()
    init = {"model_type": "qwen2", "vocab_size": 49152, "max_position_embeddings": 2048,
            **SHAPES[a.shape]}
    return ('model.path=""', f"model.init_config={_toml_table(init)}",
            f"model.tokenizer={json.dumps(a.model)}", 'model.dtype="bfloat16"',
            'data.eval_path=""')


def lora_overrides(a: argparse.Namespace) -> tuple[str, ...]:
    return ("lora.enabled=true", f"lora.rank={a.lora_rank}", f"lora.alpha={a.lora_alpha}",
            f"lora.target_modules={json.dumps([a.lora_targets])}")


def run_worker(a: argparse.Namespace, model: Path, emit: Any) -> None:
    fw = a.worker
    if fw.endswith("_lora"):
        a.lr = a.lora_lr
    if fw == "slime_full":
        workload.run_slime(a, model, emit, framework=fw, extra_set=shape_overrides(a))
    elif fw == "slime_lora":
        workload.run_slime(a, model, emit, framework=fw, plugins=("slime_lora",),
                           extra_set=(*shape_overrides(a), *lora_overrides(a)))
    elif fw in ("trl_full", "trl_lora"):
        if a.shape:
            raise SystemExit("--shape runs slime only")
        peft_config = None
        if fw == "trl_lora":
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0, bias="none",
                target_modules=("all-linear" if a.lora_targets == "all_linear"
                                else PRESETS.get(a.lora_targets, [a.lora_targets])),
                task_type="CAUSAL_LM")
        workload.run_trl(a, model, emit, framework=fw, peft_config=peft_config)
    else:
        raise SystemExit(f"unknown framework {fw!r}: slime_full, slime_lora, trl_full, trl_lora")


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    names = list(dict.fromkeys(p["framework"] for p in points if "framework" in p))
    curves = {fw: sorted((p for p in points if p.get("framework") == fw and "accuracy" in p),
                         key=lambda p: p["step"]) for fw in names}
    perf = {fw: next((p for p in points if p.get("framework") == fw
                      and p.get("what") == "startup"), None) for fw in names}
    out: dict[str, Any] = {"curves": curves, "perf": perf}
    learned = [c for c in curves.values() if c]
    if learned:
        start = min(c[0]["accuracy"] for c in learned)
        for name, target in {"best_of_all": min(max(p["accuracy"] for p in c)
                                                for c in learned),
                             "start_plus_0.15": start + 0.15}.items():
            out[name] = {"target": target,
                         **{fw: workload.first_time(c, target) for fw, c in curves.items() if c}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--frameworks", default="slime_full,slime_lora,trl_lora")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--lr", type=float, default=5e-6, help="full fine-tuning's learning rate")
    # LoRA wants a larger step than full fine-tuning (about 10x in Thinking Machines' "LoRA
    # without regret"); both frameworks' LoRA runs use this one
    ap.add_argument("--lora-lr", type=float, default=5e-5)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=32.0)
    ap.add_argument("--lora-targets", default="attention_mlp",
                    help="attention | attention_mlp | all_linear")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--eval-interval", type=int, default=5)
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--slime-set", action="append", default=[])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="")
    ap.add_argument("--model", default=str(workload.EXAMPLE / "model"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    curves = workload.run_frameworks(a, __file__, run_worker)
    if curves is None:
        return
    out = Path(a.out)
    summary = summarize([json.loads(x) for x in curves.read_text().splitlines() if x.strip()]
                        if curves.exists() else [])
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for fw, c in summary["curves"].items():
        p = summary["perf"].get(fw) or {}
        print(f"{fw}: peak {p.get('peak_memory_gb', float('nan')):.2f} GB, "
              f"{p.get('step_time_median', float('nan')):.3f} s/step, optimizer state "
              f"{p.get('optimizer_state_mb', float('nan')):.1f} MiB, sync "
              f"{p.get('weight_sync_bytes', float('nan'))} B")
        if c:
            print("   " + "  ".join(f"{q['step']}:{q['accuracy']:.3f}@{q['seconds']:.0f}s"
                                    for q in c))
    for name in ("best_of_all", "start_plus_0.15"):
        if name in summary:
            print(f"time to accuracy ({name}): {summary[name]}")


if __name__ == "__main__":
    main()
