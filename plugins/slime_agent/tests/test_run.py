"""A real ``core run`` whose rollouts are a decorated two-turn agent on the official openai
client: every turn recorded with the right masks, the agent's reward in the train batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
TOKENIZER = REPO / "examples" / "openai_agent" / "tokenizer"
EOS = 2


def reward_of(prompt: str) -> float:  # two_turn_agent.reward_of, recomputed here
    a, b = prompt.rstrip("=").split("+")
    return (int(a) + int(b)) % 7 / 10


def runs(mask: list[int]) -> list[tuple[int, int]]:
    """``[(value, length), ...]`` of consecutive equal values."""
    out: list[tuple[int, int]] = []
    for m in mask:
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1] + 1)
        else:
            out.append((m, 1))
    return out


@pytest.mark.slow  # about a minute alone, several on shared cores
def test_core_run_trains_on_the_recorded_turns_and_the_agents_reward(tmp_path: Path):
    probe = tmp_path / "probe"
    probe.mkdir()
    overrides = [f"agent.entrypoint={HERE / 'two_turn_agent.py'}:rollout",
                 "run.plugin_modules=['batch_probe']", "run.num_rollouts=2", "run.name=r",
                 f"run.output_dir={tmp_path}", "run.num_threads=1", "run.progress=false",
                 "rollout.batch_size=4", "rollout.n_samples_per_prompt=4", "eval.interval=0",
                 "rollout.max_new_tokens=6"]
    cmd = [sys.executable, "-m", "slime_core", "run", "--plugins", "slime_grpo,slime_agent",
           "--config", str(REPO / "examples" / "openai_agent" / "grpo.toml")]
    for o in overrides:
        cmd += ["-o", o]
    env = {**os.environ, "SLIME_AGENT_PROBE": str(probe),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    steps = sorted(probe.glob("step_*.json"))
    assert len(steps) == 2, steps
    for path in steps:
        batch = json.loads(path.read_text())
        assert len(batch["tokens"]) == 16  # 4 prompts x 4 samples, one segment each
        for tokens, mask, lps, n, reward in zip(batch["tokens"], batch["loss_masks"],
                                                batch["rollout_log_probs"],
                                                batch["response_lengths"], batch["raw_rewards"], strict=True):
            tokens = [int(t) for t in tokens]
            prompt = tok.decode(tokens[: len(tokens) - n])
            assert prompt.count("+") == 1 and prompt.endswith("=")
            # the agent's own reward reached the batch (the "exact" reward gives only 0 or 1)
            assert reward == pytest.approx(reward_of(prompt))
            # model turn (trainable) / the second user turn (masked) / model turn (trainable)
            shape = runs([int(m) for m in mask])
            assert [v for v, _ in shape] == [1, 0, 1], shape
            first, delta = shape[0][1], shape[1][1]
            response = tokens[-n:]
            observed = response[first:first + delta]
            # what the template writes after turn 1: its eos unless the model ended with one
            expected = ([] if response[first - 1] == EOS else [EOS]) + tok.encode(
                prompt, add_special_tokens=False)
            assert observed == expected
            assert all(lp == 0.0 for lp, m in zip(lps, mask, strict=True) if m == 0)
            assert all(lp <= 0.0 for lp in lps) and any(lp < 0.0 for lp in lps)
    rows = [json.loads(line) for line in
            next(tmp_path.glob("r-*")).joinpath("metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout/reward_mean"] > 0 for r in rows)
