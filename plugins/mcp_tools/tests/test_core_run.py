"""A real ``core run`` (tiny_arith model, GRPO, 2 steps) whose only tools are the MCP test
server's, over streamable HTTP: the CI-cheap end-to-end check of the tool source in the
multi-turn loop (the learning run is test_agentic_run.py, which needs the agentic SFT model).

The first turn of each episode is forced to be a ``calculator`` call (forced_mcp_engine.py:
the tiny model cannot be made to call a tool), with the model's own log-probs; listing the
server's tools, the call, the observation and everything after it are the real loop, MCP
client, server and model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slime_agent.testing import forced_tool_core_run

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


@pytest.mark.slow  # about a minute on shared cores
def test_core_run_calls_the_mcp_server_in_every_episode(http_server, tmp_path: Path):
    rows, samples = forced_tool_core_run(
        tmp_path, "slime_grpo,mcp_tools", REPO / "examples" / "tiny_arith" / "grpo.toml", HERE,
        "forced_mcp_engine", "forced_mcp_calculator", [
            # call (79 tokens) + observation (37) + the answer; prompt + 120 fits the 128 positions
            "rollout.max_new_tokens=120", "tools.enabled=['mcp']", "tools.max_turns=2",
            f'mcp.servers=[{{name="calc-kv", transport="http", url="{http_server}"}}]'],
        cwd=REPO)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["rollout/tool_calls_per_sample"] == 1.0
        assert r["rollout/tool_success_rate"] == 1.0
    assert len(samples) == 8
    for s in samples:
        a, b = s["prompt"].rstrip("=").split("+")
        # only the MCP server computes sums in this run (the built-in calculator is not enabled)
        assert f"</tool_call>\n<tool_response>\n{int(a) + int(b)}\n</tool_response>\n" in s["response"]
        mask = s["loss_mask"]
        assert mask[0] == 1 and 0 in mask  # the call is trained, the observation is not
