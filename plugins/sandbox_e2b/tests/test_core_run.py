"""A real ``core run`` (tiny_arith model, GRPO) whose episodes call the ``python`` tool in E2B
sandboxes: ``tools.sandbox = "e2b"`` through the SDK to the stand-in, one sandbox per episode.

The first turn of each episode is forced to be the tool call (forced_tool_engine.py: the
tiny model cannot be made to call a tool), with the model's own log-probs; the observation
and everything after it are the real loop, sandbox and model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slime_agent.testing import forced_tool_core_run

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


@pytest.mark.slow  # about a minute on shared cores
def test_core_run_with_the_python_tool_in_e2b_sandboxes(server, tmp_path: Path):
    rows, samples = forced_tool_core_run(
        tmp_path, "slime_grpo,sandbox_e2b", REPO / "examples" / "tiny_arith" / "grpo.toml", HERE,
        "forced_tool_engine", "forced_python", [
            "rollout.max_new_tokens=116", "tools.enabled=['python']", "tools.sandbox=e2b",
            "tools.max_turns=2", f"e2b.api_url={server.url}", f"e2b.sandbox_url={server.url}",
            "e2b.api_key_env=SLIME_TEST_E2B_KEY"],
        env={"SLIME_TEST_E2B_KEY": server.api_key}, cwd=REPO)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["rollout/tool_calls_per_sample"] == 1.0
        assert r["rollout/tool_success_rate"] == 1.0
    # 2 steps x 4 episodes: one sandbox each, each killed at its episode's end
    assert len(server.created) == 8 and len(server.killed) == 8 and not server.boxes
    assert sum(p == "/process.Process/Start" for _, p in server.calls) == 8
    assert len(samples) == 8
    for s in samples:
        a, b = s["prompt"].rstrip("=").split("+")
        # the sandbox printed the sum; the raw observation template wraps the tool output
        assert f"</tool_call>\n<tool_response>\n{int(a) + int(b)}\n\n</tool_response>\n" in s["response"]
        assert 0 in s["loss_mask"] and s["loss_mask"][0] == 1
