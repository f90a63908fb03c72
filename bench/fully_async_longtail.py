"""Samples per second and step time on a long-tail workload: synchronous, one-step-off and
fully-asynchronous rollouts side by side, in one process (CPU).

    python bench/fully_async_longtail.py                      # the tail dominates a step
    python bench/fully_async_longtail.py --prompts 4 --short 32 --long 320 --buffer 16
                                                              # training dominates a step
    python bench/fully_async_longtail.py --modes sync,fully_async --steps 8 --out r.json

Workload (the same in every mode): the random ~1M-parameter Qwen2 of ``grpo_vs_trl.py``
(float32), ``--prompts`` prompts x 8 samples per step, GRPO (TIS in the asynchronous modes),
lr 1e-6. Completion lengths are forced (``SamplingParams.ignore_eos`` and a per-sample
budget): one sample in 16 (sample index % 16 == 0) gets ``--long`` tokens, every other one
``--short`` (default 40 and 400: ten times the median), so a rollout that waits for all its
samples waits for its longest.

Modes:

* ``sync``: each step generates its rollout, then trains on it;
* ``one_step_off`` (``run.async_rollout``): step k+1's rollout is generated while step k
  trains; it still waits for its own longest sample, and weights never change mid-generation;
* ``fully_async`` (``run.rollout_mode = "fully_async"``, ``run.max_staleness = --staleness``,
  ``run.async_buffer_groups = --buffer``, ``run.async_chunk_tokens = --chunk``): the engine
  generates continuously; each step takes the first groups completed; a long sample goes on
  across steps (aborted at each weight update, continued with the new weights), so it holds
  back only its own group.

A step's wall time is the time between consecutive weight-sync ends (``bench_plugin``); the
first ``--warmup`` steps are discarded. samples/s = samples trained in the timed steps / their
total wall time. One-step-off runs one step more and leaves its last (no rollout in flight)
out. Every mode trains on the same number of samples a step; they differ in which samples
(fully-async trains the short ones first) and how stale they are (the staleness columns).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# before torch is imported: OpenMP threads that spin at barriers on a shared 2-core machine
# measure the machine's load (grpo_vs_trl.py says by how much)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench_plugin import BenchPlugin, drop_checkpoints, plugin_selection  # noqa: E402
from grpo_vs_trl import prompts_file, tiny_model_dir  # noqa: E402
from slime_hookspecs import Status, hookimpl  # noqa: E402

MODES = ("sync", "one_step_off", "fully_async")


class LongTailPlugin(BenchPlugin):
    """The bench plugin with per-sample forced lengths: sample index % 16 == 0 is long."""

    def __init__(self, short: int, long: int) -> None:
        super().__init__()
        self.short, self.long = short, long

    @hookimpl(tryfirst=True)
    async def slime_generate(self, config: Any, sample: Any, sampling_params: Any,
                             engine: Any) -> Any:
        from slime_core.rollout.manager import default_generate

        target = self.long if sample.index % 16 == 0 else self.short
        params = sampling_params.replace(
            ignore_eos=True, max_new_tokens=min(sampling_params.max_new_tokens, target))
        out = await default_generate(config, sample, params, engine)
        if out.status == Status.TRUNCATED and out.response_length >= target:
            out.status = Status.COMPLETED  # its own length reached: not a cut chunk
        return out


def run_mode(mode: str, args: argparse.Namespace, model: Path, prompts: Path) -> dict[str, Any]:
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    steps = args.warmup + args.steps
    run_dir = Path(tempfile.mkdtemp(prefix=f"slime-longtail-{mode}-")) / "run"
    run: dict[str, Any] = {"num_rollouts": steps, "run_dir": str(run_dir), "progress": False,
                           "loggers": ["jsonl"], "num_threads": args.threads, "seed": 1}
    if mode == "one_step_off":
        run.update(async_rollout=True, num_rollouts=steps + 1)
    elif mode == "fully_async":
        run.update(rollout_mode="fully_async", max_staleness=args.staleness,
                   async_buffer_groups=args.buffer, async_chunk_tokens=args.chunk)
    data = {
        "run": run,
        "model": {"path": str(model), "dtype": "float32"},
        "data": {"path": str(prompts)},
        "rollout": {"batch_size": args.prompts, "n_samples_per_prompt": 8,
                    "max_new_tokens": args.long,
                    "temperature": 1.0},
        "train": {"lr": 1e-6, "grad_clip": 1.0, "weight_decay": 0.0},
        "algorithm": {"advantage_estimator": "grpo", "policy_loss": "ppo", "eps_clip": 0.2,
                      "loss_reducer": "seq_mean_token_mean",
                      "is_correction": "" if mode == "sync" else "tis"},
    }
    manager, config = resolve(plugin_selection(), None, (), data)
    plugin = LongTailPlugin(args.short, args.long)
    manager.register_object(plugin, f"bench_longtail_{mode}")
    t0 = time.perf_counter()
    run_training(manager, config)
    total = time.perf_counter() - t0
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    drop_checkpoints(run_dir)
    walls = plugin.step_walls()[:steps][args.warmup:]
    timed = rows[:steps][args.warmup:]
    samples = args.prompts * 8 * len(walls)
    return {
        "mode": mode,
        "step_wall_s": walls,
        "median_step_s": statistics.median(walls),
        "samples_per_s": samples / sum(walls),
        "response_tokens_per_step": plugin.response_tokens[:steps][args.warmup:],
        "rollout_wait_s": [r.get("perf/rollout_wait_time", r.get("perf/rollout_time", 0.0))
                           for r in timed],
        "train_s": [r["perf/train_time"] for r in timed],
        # sync / one-step-off: the rollout's own duration; fully async: the window since the
        # previous step took its groups
        "rollout_s": [r.get("perf/rollout_time", 0.0) for r in timed],
        "staleness_max": [r.get("rollout/staleness_max", 0.0) for r in timed],
        "partial_resumed": [r.get("rollout/partial_resumed", 0.0) for r in timed],
        "stale_dropped": [r.get("rollout/stale_dropped", 0.0) for r in timed],
        "run_seconds": total,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=1, help="prompts (groups of 8) per step")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--short", type=int, default=40)
    ap.add_argument("--long", type=int, default=400)
    ap.add_argument("--chunk", type=int, default=0,
                    help="fully_async: run.async_chunk_tokens (0: whole budget per call)")
    ap.add_argument("--staleness", type=int, default=4, help="fully_async: run.max_staleness")
    ap.add_argument("--buffer", type=int, default=4,
                    help="fully_async: run.async_buffer_groups (0: two batches)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "slime-bench"))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"--modes: unknown mode {m!r}; choose from {', '.join(MODES)}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model, prompts = tiny_model_dir(work), prompts_file(work)
    results = [run_mode(m, args, model, prompts) for m in modes]
    print(f"\nlong-tail workload: {args.prompts} x 8 samples a step, 1 in 16 forced to {args.long} tokens, "
          f"the rest {args.short}; {args.steps} timed steps; {args.threads} threads",
          file=sys.stderr)
    # not training: what a step spends outside train_step (waiting for samples, also inside a
    # one-step-off weight sync, which first waits for the rollout in flight)
    print(f"{'mode':<14}{'samples/s':>10}{'step s (median)':>17}{'not training s':>16}"
          f"{'staleness max':>15}{'partials':>10}", file=sys.stderr)
    for r in results:
        print(f"{r['mode']:<14}{r['samples_per_s']:>10.2f}{r['median_step_s']:>17.3f}"
              f"{statistics.mean(w - t for w, t in zip(r['step_wall_s'], r['train_s'])):>16.3f}"
              f"{max(r['staleness_max']):>15.0f}"
              f"{sum(r['partial_resumed']):>10.0f}", file=sys.stderr)
    if args.out:
        payload = {"args": vars(args), "results": results}
        Path(args.out).write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
