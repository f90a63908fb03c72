"""Held-out accuracy against wall-clock time: slime and TRL's ``GRPOTrainer`` learning the SmolLM2
example (``examples/smollm2``) side by side, each in a fresh process of its own.

    python bench/smollm2_vs_trl.py --out /tmp/smollm2-bench               # the GPU workload
    python bench/smollm2_vs_trl.py --prompts 2 --group 4 --steps 2 \\
        --eval-interval 1 --eval-prompts 8 --out /tmp/plumbing           # a CPU plumbing check

The same for both: SmolLM2-135M-Instruct from ``examples/smollm2/model`` (``convert.py``),
the addition prompts of ``train.jsonl`` through the tokenizer's chat template, the reward
(slime's ``math`` reward function, math-verify on the last number, called by TRL too), prompts
per step x samples per prompt, temperature (no top-k / top-p), completion budget, learning
rate (constant, AdamW (0.9, 0.999), no weight decay, grad-norm clip 1), no KL term, one
optimizer step per rollout, token-level PPO clip 0.2 averaged per sequence then over sequences
(TRL ``loss_type="grpo"``, slime's ``seq_mean_token_mean``), group-std scaled advantages.
``--precision fp32`` (the default, as the example's config): fp32 weights and arithmetic in both.
``--precision bf16`` on CUDA: bf16 arithmetic with fp32 optimizer state in both (TRL: fp32
weights under bf16 autocast; slime: bf16 weights with fp32 master copies). At this learning
rate an update is far below a bf16 weight's spacing, so bf16 forwards see the policy move in
rare jumps; measured on the H200 it learns less per step (bench/README.md). ``--precision tf32``:
fp32 weights with TF32 products in both (``torch.set_float32_matmul_precision("high")``;
slime's ``run.matmul_precision = "high"``, with which its ``train.cuda_graphs = "auto"``
captures the training decoder).

Held-out accuracy: greedy, the same first ``--eval-prompts`` of ``eval.jsonl``, the same reward,
before the first step and every ``--eval-interval`` steps (slime: its own evaluation; TRL: HF
``generate`` in a step-end callback). The clock: seconds since the process started (the OS's
start time), minus the time spent in these evaluations; so each curve includes imports,
model loading and every warm-up. Printed: both curves, and the ratio TRL / slime of the times
at which each first reaches the same accuracy (the lower of the two best accuracies, and the
step-0 accuracy + 0.15 when both reach it). Each framework's ``startup`` row also reports the
evaluations left out of the clock (``eval_time_total`` over ``evals`` evaluations), so
evaluation time stands next to training time. ``--out`` gets ``curves.jsonl`` and
``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "smollm2"


def _process_start() -> float:
    from slime_core.runner.startup import process_start

    return process_start()


def _rows(path: Path, n: int = 0) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return rows[:n] if n else rows


def _score(response: str, label: str) -> float:
    from slime_hookspecs import Sample
    from slime_std.rewards.math_reward import math_reward

    return math_reward(Sample(response=response, label=label))


# -- slime --------------------------------------------------------------------------------------
def run_slime(a: argparse.Namespace, model: Path, emit: Any, framework: str = "slime",
              plugins: tuple[str, ...] = (), extra_set: tuple[str, ...] = ()) -> None:
    """``framework`` names the curve; ``plugins`` and ``extra_set`` (``-o`` overrides) add to
    the run (bench/smollm2_lora.py: ``slime_lora``)."""
    from bench_plugin import drop_checkpoints, plugin_selection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve
    from slime_hookspecs import hookimpl

    started = _process_start()
    run_dir = Path(tempfile.mkdtemp(prefix="slime-smollm2-")) / "run"
    overrides = [
        f"run.run_dir={json.dumps(str(run_dir))}", f"run.num_rollouts={a.steps}",
        "run.progress=false", 'run.loggers=["jsonl"]', "run.save_interval=0", f"run.seed={a.seed}",
        f"model.path={json.dumps(str(model))}",
        f"data.path={json.dumps(str(EXAMPLE / 'train.jsonl'))}",
        f"data.eval_path={json.dumps(str(EXAMPLE / 'eval.jsonl'))}",
        f"rollout.batch_size={a.prompts}", f"rollout.n_samples_per_prompt={a.group}",
        f"rollout.temperature={a.temperature}", f"rollout.max_new_tokens={a.new}",
        f"train.lr={a.lr}", f"eval.interval={a.eval_interval}",
        f"model.dtype={json.dumps('bfloat16' if a.precision == 'bf16' else 'float32')}",
        *(['run.matmul_precision="high"'] if a.precision == "tf32" else []),
        f"eval.max_prompts={a.eval_prompts}",
        *a.slime_set, *extra_set,
    ]
    evals: list[float] = []

    class Clock:
        @hookimpl
        def slime_log_eval(self, config: Any, rollout_id: int, samples: Any,
                           metrics: dict[str, float]) -> None:
            evals.append(float(metrics["perf/eval_time"]))
            emit(framework=framework, step=rollout_id, accuracy=float(metrics["eval/accuracy"]),
                 n=int(metrics.get("eval/samples", 0)),
                 seconds=time.time() - started - sum(evals))

    manager, config = resolve(plugin_selection(plugins), EXAMPLE / "grpo.toml", overrides)
    manager.register_object(Clock(), "bench_smollm2_clock")
    run_training(manager, config)
    rows = _rows(run_dir / "metrics.jsonl")
    drop_checkpoints(run_dir)
    first = next(r for r in rows if "perf/startup_time" in r)
    emit(framework=framework, what="startup", startup_time=first["perf/startup_time"],
         setup_time=first["perf/setup_time"],
         setup_parts={k.split("/")[1][len("setup_"):-len("_time")]: round(v, 3)
                      for k, v in first.items() if k.startswith("perf/setup_") and k != "perf/setup_time"},
         step_time_median=_median([r["perf/step_time"] for r in rows if "perf/step_time" in r]),
         eval_time_total=sum(evals), evals=len(evals),  # left out of the curves' clock
         peak_memory_gb=max((r.get("perf/peak_memory_gb", 0.0) for r in rows), default=0.0),
         optimizer_state_mb=max((r.get("train/optimizer_state_mb", 0.0) for r in rows),
                                default=0.0),
         weight_sync_bytes=_median([r["perf/weight_sync_bytes"] for r in rows
                                    if "perf/weight_sync_bytes" in r]),
         **{f"{key.split('/')[1]}_median": _median([r[key] for r in rows if key in r])
            for key in ("perf/rollout_time", "perf/train_time", "perf/weight_sync_time",
                        "perf/rollout_tokens_per_s", "train/mismatch_abs_logprob_diff")
            if any(key in r for r in rows)})


# -- TRL ----------------------------------------------------------------------------------------
def run_trl(a: argparse.Namespace, model: Path, emit: Any, framework: str = "trl",
            peft_config: Any = None) -> None:
    """``peft_config``: a peft ``LoraConfig`` handed to ``GRPOTrainer`` (bench/smollm2_lora.py)."""
    started = _process_start()
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    cuda = torch.cuda.is_available()
    if a.precision == "tf32":
        torch.set_float32_matmul_precision("high")
    tok = AutoTokenizer.from_pretrained(str(model))
    lm = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    train = _rows(EXAMPLE / "train.jsonl")
    held_out = _rows(EXAMPLE / "eval.jsonl", a.eval_prompts)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}],
                             "label": r["label"]} for r in train])

    def reward(completions: list[Any], label: list[str], **kw: Any) -> list[float]:
        return [_score(c[0]["content"] if isinstance(c, list) else c, lb)
                for c, lb in zip(completions, label, strict=True)]

    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                     add_generation_prompt=True) for r in held_out]
    evals: list[float] = []

    def evaluate(net: Any, step: int) -> None:
        t = time.perf_counter()
        was_training = net.training
        net.eval()
        tok.padding_side = "left"
        right = 0.0
        batch = 64
        for i in range(0, len(texts), batch):
            enc = tok(texts[i:i + batch], return_tensors="pt", padding=True,
                      add_special_tokens=False).to(net.device)
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16,
                                                      enabled=cuda and a.precision == "bf16"):
                out = net.generate(**enc, max_new_tokens=a.new, do_sample=False,
                                   pad_token_id=tok.pad_token_id)
            for row, r in zip(out[:, enc.input_ids.shape[1]:], held_out[i:i + batch],
                              strict=True):
                right += _score(tok.decode(row, skip_special_tokens=True), r["label"])
        if was_training:
            net.train()
        if cuda:
            torch.cuda.synchronize()
        evals.append(time.perf_counter() - t)
        emit(framework=framework, step=step, accuracy=right / len(texts), n=len(texts),
             seconds=time.time() - started - sum(evals))

    step_times: list[float] = []
    step_began = [0.0]

    class Clock(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step_began[0] = time.perf_counter()

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kw: Any) -> None:
            evaluate(model, 0)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        **kw: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - step_began[0])  # generation + update
            if state.global_step % a.eval_interval == 0 or state.global_step == a.steps:
                evaluate(model, state.global_step)

    n = a.prompts * a.group
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-smollm2-"), use_cpu=not cuda,
        bf16=cuda and a.precision == "bf16",
        per_device_train_batch_size=n, num_generations=a.group, gradient_accumulation_steps=1,
        max_completion_length=a.new, temperature=a.temperature, top_p=1.0, top_k=0,
        max_steps=a.steps, learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, beta=0.0, epsilon=0.2, loss_type="grpo",
        scale_rewards="group", num_iterations=1, report_to="none", logging_steps=1,
        gradient_checkpointing=False,  # TRL's default is True; slime does not recompute
        save_strategy="no", seed=a.seed, dataloader_num_workers=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=lm, reward_funcs=reward, args=args, train_dataset=ds,
                          processing_class=tok, callbacks=[Clock()], peft_config=peft_config)
    trainer.train()
    state = trainer.optimizer.state.values() if trainer.optimizer is not None else []
    emit(framework=framework, what="startup", step_time_median=_median(step_times),
         eval_time_total=sum(evals), evals=len(evals),  # left out of the curves' clock
         peak_memory_gb=(torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0),
         optimizer_state_mb=sum(int(v.numel()) * int(v.element_size()) for st in state
                                for v in st.values() if torch.is_tensor(v)) / 2**20)


# -- comparison ---------------------------------------------------------------------------------
def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def first_time(curve: list[dict[str, Any]], target: float) -> float | None:
    """Seconds at which the curve first reaches ``target`` (None: never)."""
    return next((p["seconds"] for p in curve if p["accuracy"] >= target - 1e-9), None)


def compare(points: list[dict[str, Any]]) -> dict[str, Any]:
    curves = {fw: sorted((p for p in points if p.get("framework") == fw and "accuracy" in p),
                         key=lambda p: p["step"]) for fw in ("slime", "trl")}
    out: dict[str, Any] = {"curves": curves}
    if not all(curves.values()):
        return out
    start = min(c[0]["accuracy"] for c in curves.values())
    targets = {"best_of_both": min(max(p["accuracy"] for p in c) for c in curves.values()),
               "start_plus_0.15": start + 0.15}
    for name, target in targets.items():
        times = {fw: first_time(c, target) for fw, c in curves.items()}
        ratio = (times["trl"] / times["slime"]) if None not in times.values() else None
        out[name] = {"target": target, **times, "trl_over_slime": ratio}
    return out


def run_frameworks(a: argparse.Namespace, script: str,
                   worker: Callable[[argparse.Namespace, Path, Any], None]) -> Path | None:
    """The process layout of the learning benchmarks: with ``--worker FW`` (a child), run
    ``worker(a, model, emit)``, each ``emit(**row)`` one JSON line printed and appended to
    ``OUT/curves.jsonl``, and return ``None``; else start ``script --worker FW`` in a fresh
    process for each of ``--frameworks`` in turn and return the curves file they wrote."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    curves = out / "curves.jsonl"
    model = Path(a.model)
    if not (model / "config.json").exists():
        raise SystemExit(f"{model} is missing: run python examples/smollm2/convert.py first")
    if a.worker:
        # SLIME_BENCH_DUMP_AFTER=S: every thread's stack to stderr after S seconds, then exit
        # (what a hung run was doing)
        if os.environ.get("SLIME_BENCH_DUMP_AFTER"):
            import faulthandler

            faulthandler.dump_traceback_later(float(os.environ["SLIME_BENCH_DUMP_AFTER"]),
                                              exit=True)
        with curves.open("a") as f:
            def emit(**kw: Any) -> None:
                line = json.dumps(kw)
                print(line, flush=True)
                f.write(line + "\n")
                f.flush()
            worker(a, model, emit)
        return None
    curves.unlink(missing_ok=True)
    for fw in a.frameworks.split(","):
        cmd = [sys.executable, script, "--worker", fw, *sys.argv[1:]]
        t = time.perf_counter()
        rc = subprocess.call(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        print(f"{fw}: exit {rc} after {time.perf_counter() - t:.1f} s", flush=True)
    return curves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for curves.jsonl and summary.json")
    ap.add_argument("--frameworks", default="slime,trl")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt")
    ap.add_argument("--new", type=int, default=32, help="max completion tokens")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--lr", type=float, default=5e-6)
    ap.add_argument("--seed", type=int, default=1, help="both frameworks' seed")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--eval-interval", type=int, default=5)
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--slime-set", action="append", default=[],
                    help="SECTION.KEY=VALUE for slime only (core run -o syntax)")
    ap.add_argument("--slime-plugins", default="",
                    help="more plugins for slime, comma-separated (e.g. sglang_rollout)")
    ap.add_argument("--label", default="slime", help="the slime worker's framework label")
    ap.add_argument("--model", default=str(EXAMPLE / "model"))
    ap.add_argument("--worker", choices=["slime", "trl"], help=argparse.SUPPRESS)
    a = ap.parse_args()

    def worker(a: argparse.Namespace, model: Path, emit: Any) -> None:
        if a.worker == "slime":
            run_slime(a, model, emit, framework=a.label,
                      plugins=tuple(x for x in a.slime_plugins.split(",") if x))
        else:
            run_trl(a, model, emit)

    curves = run_frameworks(a, __file__, worker)
    if curves is None:
        return
    out = Path(a.out)
    summary = compare(_rows(curves))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for fw, c in summary["curves"].items():
        print(f"{fw}: " + "  ".join(f"{p['step']}:{p['accuracy']:.3f}@{p['seconds']:.0f}s"
                                    for p in c))
    for name in ("best_of_both", "start_plus_0.15"):
        if name in summary:
            s = summary[name]
            print(f"time to accuracy {s['target']:.3f} ({name}): slime {s['slime']}, trl "
                  f"{s['trl']}, TRL / slime {s['trl_over_slime']}")


if __name__ == "__main__":
    main()
