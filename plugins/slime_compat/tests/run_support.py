"""Run the real ``core run`` in a subprocess on the tiny arithmetic model."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ARITH = ROOT / "examples" / "tiny_arith"


def base_config(run_dir: Path, steps: int = 2) -> str:
    return f"""
[run]
run_dir = "{run_dir}"
seed = 1
num_rollouts = {steps}
num_threads = 2
progress = false
loggers = ["jsonl"]

[model]
path = "{ARITH / 'model'}"

[data]
path = "{ARITH / 'train.jsonl'}"

[rollout]
batch_size = 4
n_samples_per_prompt = 4
max_new_tokens = 8
reward = "exact"

[train]
lr = 1e-4
"""


def core(args: list[str], log: Path, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLIME_USER_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "slime_core", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
