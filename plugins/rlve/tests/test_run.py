"""``core run`` with the rlve source: the level moves, is logged per step, lands in the
checkpoint, and a resume continues from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow  # about 40 s alone, minutes on shared cores
def test_core_run_logs_and_checkpoints_the_level(tmp_path: Path):
    # the example's config, made short; from level 1 any accuracy below 0.99 moves down
    overrides = ["rlve.start_level=1", "rlve.window=8", "rlve.up_threshold=1.0",
                 "rlve.down_threshold=0.99", "run.num_rollouts=2", "run.save_interval=1",
                 f"run.output_dir={tmp_path}", "run.name=r", "run.num_threads=1",
                 "rollout.batch_size=4", "rollout.max_new_tokens=6", "eval.interval=0"]
    cmd = [sys.executable, "-m", "slime_core", "run", "--plugins", "slime_grpo,rlve",
           "--config", str(REPO / "examples" / "rlve_arith" / "grpo.toml")]
    for o in overrides:
        cmd += ["-o", o]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = tmp_path.glob("r-*")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in rows}
    # step 1 drew at level 1 and scored below 0.99 on 8 samples: one level down
    assert steps[1]["rlve/sampled_level"] == 1.0 and steps[1]["rlve/level"] == 0.0
    assert "rlve/accuracy_level_1" in steps[1] and steps[1]["rlve/max_level"] == 1.0
    assert steps[2]["rlve/sampled_level"] == 0.0
    state = json.loads((run / "checkpoints" / "step_000001" / "data_source.json").read_text())
    found = json.dumps(state)
    assert '"slime.rlve/1"' in found and '"history": [{"step": 0, "src": 1, "dst": 0' in found


@pytest.mark.slow  # about 25 s alone (15 GRPO steps of the tiny model, two greedy evals)
def test_accuracy_at_the_hardest_reached_level_rises(tmp_path: Path):
    """The example's ladder (operands of 1, 1-2, 2 digits) on the tiny model, shortened: the
    level climbs, and the held-out greedy accuracy at the hardest level reached rises. (A
    three-digit level, the example's first ladder, scored 0 on every sample: no GRPO signal.)"""
    overrides = ["run.num_rollouts=15", "run.save_interval=15", "eval.interval=15",
                 f"run.output_dir={tmp_path}", "run.name=r", "run.progress=false"]
    cmd = [sys.executable, "-m", "slime_core", "run", "--plugins", "slime_grpo,rlve",
           "--config", str(REPO / "examples" / "rlve_arith" / "grpo.toml")]
    for o in overrides:
        cmd += ["-o", o]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = tmp_path.glob("r-*")
    rows = {r["step"]: r for r in (json.loads(x) for x in
                                   (run / "metrics.jsonl").read_text().splitlines())}
    hardest = int(rows[15]["rlve/max_level"])
    assert hardest >= 1  # measured: up at steps 7 and 12 (rolling accuracy 0.72, 0.71)
    key = f"eval/rlve/accuracy_level_{hardest}"
    assert rows[15][key] >= rows[0][key] + 0.3, (rows[0][key], rows[15][key])  # 0.05 -> 0.85
    state = json.loads((run / "checkpoints" / "step_000015" / "data_source.json").read_text())
    assert state["controller"]["max_level"] == hardest
    assert [m["dst"] for m in state["controller"]["history"]][:hardest] == list(range(1, hardest + 1))
