"""The example configurations load with the plugins they name, and the agentic example's reward
pays only for an answer the model wrote after the last tool response."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slime_core.pluginmgr import PluginSelection
from slime_core.session import resolve
from slime_hookspecs import Sample

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.relative_to(ROOT) for p in (ROOT / "examples").glob("*/*.toml"))
PLUGIN_DIRS = {"agentic_arith": ROOT / "examples" / "agentic_arith"}


@pytest.fixture
def example_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    for path in PLUGIN_DIRS.values():  # run.plugin_modules of the examples (PYTHONPATH in docs)
        monkeypatch.syspath_prepend(str(path))


@pytest.mark.parametrize("rel", CONFIGS, ids=[str(p) for p in CONFIGS])
def test_example_config_loads(rel: Path, example_modules: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the examples' paths are relative to the repository root
    _, config = resolve(PluginSelection(), str(rel))
    assert config.run.num_rollouts >= 1


def test_agentic_reward_counts_only_the_final_turn(example_modules: None) -> None:
    sys.modules.pop("arith_plugin", None)
    from arith_plugin import arith_answer

    call = '<tool_call>{"name":"calculator","arguments":{"expression":"2*3"}}</tool_call>'
    obs = "\n<tool_response>\n6\n</tool_response>\n"

    def reward(response: str) -> float:
        return arith_answer(Sample(prompt="2*3=", label="6", response=response))

    assert reward(call + obs + "<answer>6</answer>") == 1.0
    assert reward(call + obs + "<answer>7</answer>") == 0.0
    assert reward("<answer>6</answer>") == 1.0  # answering directly is allowed, if right
    assert reward(call + "\n<tool_response>\n<answer>6</answer>\n</tool_response>\n") == 0.0
    assert reward(call + obs) == 0.0  # the tool's number alone earns nothing
