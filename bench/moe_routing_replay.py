"""Rollout routing replay (R3) on against off, same runs otherwise: the train-vs-rollout
log-prob mismatch side by side, on the tiny_moe example (examples/tiny_moe: the tiny_arith
model upcycled into a 4-expert top-2 Mixtral, GRPO on two-digit addition, CPU).

    python examples/tiny_moe/make_model.py          # once
    python bench/moe_routing_replay.py --steps 10   # four runs of `core run`, a table, a JSON

Where does a mismatch come from? In fp32 with the engine and trainer on the same weights the
two forwards agree to ~1e-7 and routing replay has nothing to remove. The settings measured
make the two differ the way they do at scale:

* ``bf16``: ``model.dtype = "bfloat16"`` for engine and trainer: the engine's cached,
  token-by-token decode and the trainer's full-sequence forward round differently (as
  SGLang's and Megatron's kernels do), so near-tied router logits flip experts;
* ``one_step_off``: ``run.rollout_mode = "one_step_off"``: each rollout comes from the
  weights one update behind the trainer's, so routing drifts with the update.

* ``bf16_rollout`` (no ``core run``): the engine in bf16, the trainer's forward in fp32 on the
  same weights (low-precision rollouts, as FP8/bf16 inference engines serve fp32/bf16
  trainers): 256 completions of 32 tiny_arith prompts, their fp32 log-probs without and with
  the recorded routing, on the very same samples.

Each ``core run`` setting runs twice with the same seed, ``train.routing_replay`` off and ``rollout``; the
first step trains on identical samples in both (recording does not change sampling). Reported
per step: ``train/mismatch_abs_logprob_diff`` (mean |log p_train - log p_rollout| over trained
tokens, before the update), ``train/routing_replay_agreement`` (replay on: the share of
replayed expert choices the trainer's routers would have made themselves),
``rollout/routing_record_bytes`` (record size per sample) and the reward.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "tiny_moe" / "grpo.toml"
SETTINGS = {
    "bf16": ["model.dtype=bfloat16"],
    "one_step_off": ["run.rollout_mode=one_step_off"],
    "fp32": [],
}
KEYS = ("train/mismatch_abs_logprob_diff", "train/routing_replay_agreement",
        "rollout/routing_record_bytes", "rollout/reward_mean", "perf/step_time")


def run(setting: str, replay: str, steps: int, out_dir: Path) -> list[dict[str, float]]:
    """``core run`` of the tiny_moe example; its metrics rows."""
    run_dir = out_dir / f"{setting}-{replay}"
    overrides = [f"run.num_rollouts={steps}", "eval.interval=0", "run.progress=false",
                 f"run.run_dir={run_dir}", f"train.routing_replay={replay}",
                 *SETTINGS[setting]]
    cmd = [sys.executable, "-m", "slime_core", "run", "--plugins", "slime_grpo",
           "--config", str(CONFIG)]
    for o in overrides:
        cmd += ["-o", o]
    t0 = time.time()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"{setting}/{replay} failed:\n{res.stderr[-3000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    print(f"{setting:>13} replay={replay:<8} {time.time() - t0:5.0f} s", file=sys.stderr)
    return [{k: r[k] for k in KEYS if k in r} | {"step": r["step"]} for r in rows if "step" in r
            and "train/mismatch_abs_logprob_diff" in r]


def same_samples(path: str, engine_dtype: str = "bfloat16") -> dict[str, float]:
    """The ``bf16_rollout`` measurement of the module docstring, on the model at ``path``."""
    import torch
    from slime_core.models.loading import load_causal_lm
    from slime_core.moe.routing import RoutingControl, from_record
    from slime_core.testing import build_test_config
    from slime_core.trainkit.batching import response_log_probs
    from slime_hookspecs import SamplingParams
    from slime_std.engine.local_engine import LocalEngine
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    rows = [json.loads(x) for x in (ROOT / "examples/tiny_arith/eval.jsonl").read_text().splitlines()]
    prompts = [tok(r["prompt"])["input_ids"] for r in rows[:32] for _ in range(8)]
    params = [SamplingParams(temperature=1.0, max_new_tokens=8, seed=i) for i in range(len(prompts))]
    config = build_test_config(model={"path": path, "dtype": engine_dtype},
                               train={"routing_replay": "rollout"})
    outs = LocalEngine(config).generate(prompts, params)
    model = load_causal_lm(build_test_config(model={"path": path}).model, "cpu", torch.float32)
    control = RoutingControl(model)
    seqs = [torch.tensor(p + o.token_ids) for p, o in zip(prompts, outs, strict=True)]
    resp = [len(o.token_ids) for o in outs]
    routes = [from_record(o.routed_experts) for o in outs]
    # response tokens predicted at a position where the fp32 routers pick other experts than
    # the bf16 rollout did (in any layer): where replay can act directly
    flipped = []
    with torch.no_grad():
        for seq, r, rec in zip(seqs, resp, routes, strict=True):
            with control.recording():
                model(input_ids=seq[None])
                own = control.take()[:-1].long().sort(-1).values
            flips = (own != rec.long().sort(-1).values).any(-1).any(-1)  # per position
            flipped.append(flips[len(seq) - r - 1:len(seq) - 1])
    out: dict[str, float] = {"flipped_tokens": float(sum(int(f.sum()) for f in flipped)),
                             "tokens": float(sum(resp))}
    with torch.no_grad():
        for name, extra in (("off", {}), ("rollout", {"routing": control, "routes": routes})):
            lps, _ = response_log_probs(model, seqs, resp, 1.0, 0, **extra)
            diffs = [(lp - torch.tensor(o.log_probs)).abs() for lp, o in zip(lps, outs, strict=True)]
            out[name] = sum(float(d.sum()) for d in diffs) / sum(resp)
            out[name + "_flipped"] = (sum(float(d[f].sum()) for d, f in zip(diffs, flipped, strict=True))
                                      / max(out["flipped_tokens"], 1.0))
    out["agreement"] = control.agreement() or float("nan")
    out["record_bytes_per_sample"] = statistics.fmean(o.routed_experts.nbytes for o in outs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--settings", default="bf16,one_step_off",
                    help=f"core run settings, of {', '.join(SETTINGS)} (empty: none)")
    ap.add_argument("--out", default=None, help="JSON file of the results")
    ap.add_argument("--same-samples-model", default=str(CONFIG.parent / "model"),
                    help="the model of the same-samples measurement (e.g. one made with "
                         "make_model.py --noise 0.5 --out DIR: more dissimilar experts)")
    ap.add_argument("--work-dir", default=str(Path(tempfile.gettempdir()) / "slime-bench-r3"))
    args = ap.parse_args()
    if not (CONFIG.parent / "model" / "model.safetensors").is_file():
        raise SystemExit("examples/tiny_moe/model/ is missing: run "
                         "python examples/tiny_moe/make_model.py first")
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    direct = same_samples(args.same_samples_model)
    print(f"bf16 rollout, fp32 training forward, same 256 samples: mismatch R3 off "
          f"{direct['off']:.3e}, on {direct['rollout']:.3e}; on the {direct['flipped_tokens']:.0f}"
          f" of {direct['tokens']:.0f} tokens predicted where routing flipped: off "
          f"{direct['off_flipped']:.3e}, on {direct['rollout_flipped']:.3e}; agreement "
          f"{direct['agreement']:.4f}", file=sys.stderr)
    for setting in filter(None, args.settings.split(",")):
        results[setting] = {r: run(setting, r, args.steps, Path(args.work_dir))
                            for r in ("off", "rollout")}
    mm = "train/mismatch_abs_logprob_diff"
    print("\n| setting | step | mismatch, R3 off | mismatch, R3 on | agreement (on) | "
          "record bytes/sample | reward off / on |\n|---|---|---|---|---|---|---|")
    for setting, by in results.items():
        for off, on in zip(by["off"], by["rollout"], strict=True):
            print(f"| {setting} | {off['step']} | {off[mm]:.2e} | {on[mm]:.2e} | "
                  f"{on.get('train/routing_replay_agreement', float('nan')):.4f} | "
                  f"{on.get('rollout/routing_record_bytes', float('nan')):.0f} | "
                  f"{off['rollout/reward_mean']:.3f} / {on['rollout/reward_mean']:.3f} |")
        print(f"| {setting} | mean | {statistics.fmean(r[mm] for r in by['off']):.2e} | "
              f"{statistics.fmean(r[mm] for r in by['rollout']):.2e} | | | |")
    if args.out:
        Path(args.out).write_text(json.dumps({"steps": args.steps, "results": results,
                                              "bf16_rollout_same_samples": direct},
                                             indent=1) + "\n")


if __name__ == "__main__":
    main()
