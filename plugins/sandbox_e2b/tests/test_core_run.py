"""A real ``core run`` (tiny_arith model, GRPO) whose episodes call the ``python`` tool in E2B
sandboxes: ``tools.sandbox = "e2b"`` through the SDK to the stand-in, one sandbox per episode.

The first turn of each episode is forced to be the tool call (forced_tool_engine.py: the
tiny model cannot be made to call a tool), with the model's own log-probs; the observation
and everything after it are the real loop, sandbox and model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


@pytest.mark.slow  # about a minute on shared cores
def test_core_run_with_the_python_tool_in_e2b_sandboxes(server, tmp_path: Path):
    dumps = tmp_path / "dumps"
    overrides = [
        "run.plugin_modules=['forced_tool_engine']", "run.num_rollouts=2", "run.name=r",
        f"run.output_dir={tmp_path}", "run.num_threads=1", "run.progress=false",
        "rollout.engine=forced_python", "rollout.batch_size=2", "rollout.n_samples_per_prompt=2",
        "rollout.max_new_tokens=116", "eval.interval=0", f"debug.save_rollouts={dumps}",
        "tools.enabled=['python']", "tools.sandbox=e2b", "tools.max_turns=2",
        f"e2b.api_url={server.url}", f"e2b.sandbox_url={server.url}",
        "e2b.api_key_env=SLIME_TEST_E2B_KEY"]
    cmd = [sys.executable, "-m", "slime_core", "run", "--plugins", "slime_grpo,sandbox_e2b",
           "--config", str(REPO / "examples" / "tiny_arith" / "grpo.toml")]
    for o in overrides:
        cmd += ["-o", o]
    env = {**os.environ, "SLIME_TEST_E2B_KEY": server.api_key,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in
            next(tmp_path.glob("r-*")).joinpath("metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["rollout/tool_calls_per_sample"] == 1.0
        assert r["rollout/tool_success_rate"] == 1.0
    # 2 steps x 4 episodes: one sandbox each, each killed at its episode's end
    assert len(server.created) == 8 and len(server.killed) == 8 and not server.boxes
    assert sum(p == "/process.Process/Start" for _, p in server.calls) == 8
    samples = [json.loads(line) for f in sorted(dumps.glob("rollout_*.jsonl"))
               for line in f.read_text().splitlines()[1:]]
    assert len(samples) == 8
    for s in samples:
        a, b = s["prompt"].rstrip("=").split("+")
        # the sandbox printed the sum; the raw observation template wraps the tool output
        assert f"</tool_call>\n<tool_response>\n{int(a) + int(b)}\n\n</tool_response>\n" in s["response"]
        assert 0 in s["loss_mask"] and s["loss_mask"][0] == 1
