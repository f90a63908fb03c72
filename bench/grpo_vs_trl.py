"""Seconds per GRPO step: slime next to TRL's ``GRPOTrainer`` on the same workload (CPU).

    python bench/grpo_vs_trl.py                       # both workloads, 3 repetitions each
    python bench/grpo_vs_trl.py --workload tiny --reps 3 --steps 5
    python bench/grpo_vs_trl.py --workload smollm2 --reps 2 --steps 2
    python bench/grpo_vs_trl.py --workload tiny --slime-set run.async_rollout=true

What is the same for both frameworks (per workload):

* model weights: one directory loaded by both in float32 (``tiny``: a random ~1M-parameter
  Qwen2 saved with ``save_pretrained`` plus a character tokenizer from
  ``slime_core.testing.write_char_tokenizer``; ``smollm2``: ``examples/smollm2/model``, made by
  ``examples/smollm2/convert.py``);
* prompts: the same raw text prompts (no chat template), tokenized without special tokens;
* group size, prompts per step, max completion length, temperature 1 (no top-k / top-p),
  lr 1e-6 constant, AdamW (0.9, 0.999), no weight decay, grad-norm clip 1.0, no KL term
  (no reference model), one optimizer step per rollout (so neither computes old log-probs),
  token-level PPO clip 0.2 averaged per sequence then over sequences (TRL ``loss_type="grpo"``,
  slime's ``seq_mean_token_mean``), the same reward function (share of digits in the text);
* completion length FORCED to the maximum for both: TRL through
  ``generation_kwargs={"min_new_tokens": L}`` (EOS suppressed until L tokens), slime through a
  ``slime_generate`` hook that sets ``SamplingParams.ignore_eos`` (EOS may be sampled but
  does not stop the row). Every step therefore generates and trains on exactly P x G x L
  completion tokens in both;
* ``torch.set_num_threads(--threads)`` (default 2) in both, and the same OpenMP wait policy
  (``--omp-wait-policy``, default ``PASSIVE``): on a shared 2-core machine whose load is above
  2, OpenMP threads that spin at every barrier make each small kernel 10-100x slower
  (measured: a 2-layer forward 0.7 s spinning, 0.01-0.03 s passive), which would measure the
  machine's load rather than the frameworks. ``unset`` leaves the runtime's default (spin
  briefly, then sleep), which is what a user gets; ``ACTIVE`` spins forever;
* TRL's ``gradient_checkpointing`` is turned off (its default is on; slime does not
  recompute activations), so TRL is not charged for a memory-saving choice.

Measurement: each repetition is a fresh process per framework (order alternates between
repetitions); ``--warmup`` steps are discarded, then ``--steps`` steps are timed. A step's
wall time is the time between consecutive step ends (TRL: ``on_step_end``; slime:
``slime_after_weight_sync``, which ends every step and also the initial sync), so it covers
generation, reward, training, weight sync and logging alike; the process CPU time (all
threads) over the same interval is recorded too, since on a shared machine it depends far
less on what else runs than the wall time does. slime's own
``perf/total_step_time`` (from ``metrics.jsonl``) is reported too. The medians over every
timed step of every repetition are printed with their ratio; ``--out`` writes everything
as JSON.

``--slime-set SECTION.KEY=VALUE`` (repeatable; the syntax of ``core run -o``) changes
slime's side only, e.g. ``run.async_rollout=true``: slime's one-step-off pipeline, where
step k+1's rollout is generated (by the weights before step k's update) while step k
trains. TRL's ``GRPOTrainer`` has no counterpart (its experimental async trainer needs a
vLLM server), so that row compares two different schedules of the same workload: every
sample is still trained on once, with one optimizer step per rollout, but one update stale.
Its last step has no rollout in flight, so such a run makes one step more and leaves that
one out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_plugin import BenchPlugin, digit_share, drop_checkpoints, plugin_selection, prompt_texts

REPO = Path(__file__).resolve().parents[1]

WORKLOADS: dict[str, dict[str, Any]] = {
    # prompts x group size = samples per step; new = completion tokens per sample (forced)
    "tiny": {"prompts": 4, "group": 8, "new": 64, "steps": 5, "warmup": 1},
    "smollm2": {"prompts": 1, "group": 8, "new": 128, "steps": 2, "warmup": 1},
}
LR = 1e-6
SEED = 1


# -- shared inputs ---------------------------------------------------------------------------
def tiny_model_dir(work: Path, name: str = "tiny_qwen2", width: int = 128, layers: int = 4,
                   heads: int = 2) -> Path:
    """A random Qwen2 (~1M parameters at the defaults; MLP 4x ``width``) plus a character
    tokenizer, saved once under ``work/name``."""
    out = work / name
    if (out / "config.json").exists():
        return out
    import torch
    from slime_core.testing import write_char_tokenizer
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tmp = work / f"{name}.tmp"
    write_char_tokenizer(tmp)
    tok = AutoTokenizer.from_pretrained(str(tmp))
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=width, intermediate_size=4 * width,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=heads, max_position_embeddings=512,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(str(tmp))
    tmp.rename(out)
    return out


def model_dir(workload: str, work: Path) -> Path:
    if workload == "tiny":
        return tiny_model_dir(work)
    path = REPO / "examples" / "smollm2" / "model"
    if not (path / "config.json").exists():
        raise SystemExit(f"{path} is missing: run python examples/smollm2/convert.py first")
    return path


def prompts_file(work: Path) -> Path:
    path = work / "prompts.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps({"prompt": p, "label": "0"}) + "\n"
                                for p in prompt_texts()))
    return path


# -- workers (one framework, one repetition, in its own process) ----------------------------
def run_slime(model: Path, prompts: Path, w: dict[str, Any], threads: int,
              settings: list[str]) -> dict[str, Any]:
    from slime_core.config.loader import parse_override
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    run_dir = Path(tempfile.mkdtemp(prefix="slime-bench-")) / "run"
    data = {
        "run": {"num_rollouts": w["warmup"] + w["steps"], "run_dir": str(run_dir),
                "progress": False, "loggers": ["jsonl"], "num_threads": threads, "seed": SEED},
        "model": {"path": str(model), "dtype": "float32"},
        "data": {"path": str(prompts)},
        "rollout": {"batch_size": w["prompts"], "n_samples_per_prompt": w["group"],
                    "max_new_tokens": w["new"], "temperature": 1.0, "top_p": 1.0, "top_k": -1},
        "train": {"lr": LR, "grad_clip": 1.0, "weight_decay": 0.0},
        "algorithm": {"advantage_estimator": "grpo", "policy_loss": "ppo", "eps_clip": 0.2,
                      "loss_reducer": "seq_mean_token_mean"},
    }
    for item in settings:  # parsed as `core run -o` parses its overrides
        section, key, value = parse_override(item)
        data.setdefault(section, {})[key] = value
    # one-step-off: the last step trains with no rollout in flight (shorter than the rest),
    # so run one step more and leave it out of the timed ones
    steps = w["warmup"] + w["steps"]
    if data["run"].get("async_rollout"):
        data["run"]["num_rollouts"] = steps + 1
    manager, config = resolve(plugin_selection(), None, (), data)
    bench = BenchPlugin()
    manager.register_object(bench, "bench_grpo_vs_trl")
    run_training(manager, config)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    drop_checkpoints(run_dir)
    return {
        "wall": bench.step_walls()[:steps],
        "cpu": bench.step_cpu()[:steps],
        "total_step_time": [r["perf/total_step_time"] for r in rows][:steps],
        "step_time": [r["perf/step_time"] for r in rows][:steps],
        "phases": bench.phases,
        "rollout_cpu": bench.phase_cpu["rollout"],
        "gc_s": bench.phase_gc,
        "sys_s": bench.phase_sys,
        "minor_faults": bench.phase_faults,
        "heap_mib": bench.phase_heap,  # glibc's heap after each phase (bench_plugin.heap_mib)
        "response_tokens": bench.response_tokens,
    }


def run_trl(model: Path, prompts: Path, w: dict[str, Any], threads: int) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    ends: list[float] = []
    cpu: list[float] = []
    lengths: list[float] = []

    class Timer(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            ends.append(time.perf_counter())
            cpu.append(time.process_time())

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            ends.append(time.perf_counter())
            cpu.append(time.process_time())

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "completions/mean_length" in logs:
                lengths.append(float(logs["completions/mean_length"]))

    def reward(completions: list[str], **kw: Any) -> list[float]:
        return [digit_share(c) for c in completions]

    tok = AutoTokenizer.from_pretrained(str(model))
    lm = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    rows = [json.loads(x) for x in prompts.read_text().splitlines()]
    ds = Dataset.from_list([{"prompt": r["prompt"]} for r in rows])
    n = w["prompts"] * w["group"]
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), use_cpu=True, bf16=False,
        per_device_train_batch_size=n, num_generations=w["group"],
        gradient_accumulation_steps=1, max_completion_length=w["new"],
        generation_kwargs={"min_new_tokens": w["new"]}, temperature=1.0, top_p=1.0, top_k=0,
        max_steps=w["warmup"] + w["steps"], learning_rate=LR, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, beta=0.0, epsilon=0.2,
        loss_type="grpo", num_iterations=1, report_to="none", logging_steps=1,
        gradient_checkpointing=False,  # TRL's default is True; slime does not recompute
        save_strategy="no", seed=SEED, dataloader_num_workers=0, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=lm, reward_funcs=reward, args=args, train_dataset=ds,
                          processing_class=tok, callbacks=[Timer()])
    # time TRL's rollout phase (generation + scoring + advantages) the way slime's is timed
    rollout: list[float] = []
    rollout_cpu: list[float] = []
    inner = trainer._generate_and_score_completions

    def timed_rollout(*a: Any, **kw: Any) -> Any:
        t, c = time.perf_counter(), time.process_time()
        out = inner(*a, **kw)
        rollout.append(time.perf_counter() - t)
        rollout_cpu.append(time.process_time() - c)
        return out

    trainer._generate_and_score_completions = timed_rollout
    torch.set_num_threads(threads)  # again: nothing above may have changed it
    trainer.train()
    return {"wall": [b - a for a, b in zip(ends, ends[1:], strict=False)],
            "cpu": [b - a for a, b in zip(cpu, cpu[1:], strict=False)], "response_len_mean": lengths,
            "rollout": rollout, "rollout_cpu": rollout_cpu}


def worker(framework: str, workload: str, work: Path, threads: int,
           overrides: dict[str, int], settings: list[str]) -> None:
    import torch

    torch.set_num_threads(threads)
    w = {**WORKLOADS[workload], **overrides}
    model, prompts = model_dir(workload, work), prompts_file(work)
    if framework == "slime":
        out = run_slime(model, prompts, w, threads, settings)
    else:
        out = run_trl(model, prompts, w, threads)
    out["threads"] = torch.get_num_threads()
    print("RESULT " + json.dumps(out), flush=True)


# -- driver ----------------------------------------------------------------------------------
def spawn(framework: str, workload: str, work: Path, threads: int,
          overrides: dict[str, int], wait_policy: str, settings: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", framework, "--workload", workload,
           "--work-dir", str(work), "--threads", str(threads)]
    for k, v in overrides.items():
        cmd += [f"--{k}", str(v)]
    for assignment in settings:
        cmd += ["--slime-set", assignment]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
           "OMP_WAIT_POLICY": wait_policy}
    if wait_policy == "unset":  # the OpenMP runtime's default (spin briefly, then sleep)
        env.pop("OMP_WAIT_POLICY")
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"{framework} worker failed ({workload}), exit {proc.returncode}")
    out = json.loads(lines[-1][len("RESULT "):])
    out["load_avg_1min"] = [load, os.getloadavg()[0]]  # before, after
    return out


def bench(workload: str, reps: int, work: Path, threads: int,
          overrides: dict[str, int], wait_policy: str, settings: list[str]) -> dict[str, Any]:
    w = {**WORKLOADS[workload], **overrides}
    runs: dict[str, list[dict[str, Any]]] = {"slime": [], "trl": []}
    model_dir(workload, work)  # build once, outside the timed workers
    for rep in range(reps):
        order = ["trl", "slime"] if rep % 2 == 0 else ["slime", "trl"]
        for fw in order:
            res = spawn(fw, workload, work, threads, overrides, wait_policy, settings)
            runs[fw].append(res)
            timed = res["wall"][w["warmup"]:]
            cpu = res["cpu"][w["warmup"]:]
            print(f"  {workload} rep {rep + 1}/{reps} {fw:5s}: "
                  + " ".join(f"{x:.3f}" for x in timed) + " s/step; CPU "
                  + " ".join(f"{x:.3f}" for x in cpu) + " s/step  (load "
                  + "/".join(f"{x:.1f}" for x in res["load_avg_1min"]) + ")", flush=True)
    med = {fw: statistics.median(x for r in rs for x in r["wall"][w["warmup"]:])
           for fw, rs in runs.items()}
    med_cpu = {fw: statistics.median(x for r in rs for x in r["cpu"][w["warmup"]:])
               for fw, rs in runs.items()}
    slime_own = statistics.median(
        x for r in runs["slime"] for x in r["total_step_time"][w["warmup"]:])
    return {"workload": workload, "config": w, "threads": threads, "reps": reps,
            "omp_wait_policy": wait_policy, "slime_settings": settings,
            "median_s_per_step": med, "slime_total_step_time_median": slime_own,
            "ratio_slime_over_trl": med["slime"] / med["trl"],
            "median_cpu_s_per_step": med_cpu,
            "cpu_ratio_slime_over_trl": med_cpu["slime"] / med_cpu["trl"], "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=["tiny", "smollm2", "both"], default="both")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--omp-wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE", "unset"])
    ap.add_argument("--steps", type=int, help="timed steps per repetition (default per workload)")
    ap.add_argument("--warmup", type=int, help="discarded steps per repetition")
    ap.add_argument("--prompts", type=int, help="prompts per step")
    ap.add_argument("--group", type=int, help="samples per prompt")
    ap.add_argument("--new", type=int, help="completion tokens per sample (forced)")
    ap.add_argument("--slime-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a slime config setting on top of the workload's (repeatable), "
                         "e.g. run.async_rollout=true")
    ap.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "slime-bench"))
    ap.add_argument("--out", help="write every number as JSON here")
    ap.add_argument("--worker", choices=["slime", "trl"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    work = Path(a.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    overrides = {k: v for k in ("steps", "warmup", "prompts", "group", "new")
                 if (v := getattr(a, k)) is not None}
    if a.worker:
        if a.workload == "both":
            raise SystemExit("--worker needs one --workload")
        worker(a.worker, a.workload, work, a.threads, overrides, a.slime_set)
        return
    names = ["tiny", "smollm2"] if a.workload == "both" else [a.workload]
    results = []
    for name in names:
        results.append(bench(name, a.reps, work, a.threads, overrides, a.omp_wait_policy,
                             a.slime_set))
    print("\nmedians over every timed step of every repetition")
    print("workload  samples x tokens   slime s/step   TRL s/step   slime/TRL   "
          "slime CPU-s/step   TRL CPU-s/step   slime/TRL (CPU)   (slime perf/total_step_time)")
    for r in results:
        c, m, k = r["config"], r["median_s_per_step"], r["median_cpu_s_per_step"]
        print(f"{r['workload']:8s}  {c['prompts'] * c['group']:4d} x {c['new']:<4d}      "
              f"{m['slime']:10.3f}   {m['trl']:10.3f}   {r['ratio_slime_over_trl']:9.3f}   "
              f"{k['slime']:16.3f}   {k['trl']:14.3f}   {r['cpu_ratio_slime_over_trl']:15.3f}   "
              f"({r['slime_total_step_time_median']:.3f})")
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
