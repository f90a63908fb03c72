"""A plugin module for test_core_run.py: the rollout engine ``forced_python``, the real local
engine (the tiny_arith model) whose first turn of every episode is forced to be a call of the
``python`` tool that prints the sum of the prompt (``slime_agent.testing``); every later turn is
the model's real generation."""

from __future__ import annotations

import json
from typing import Any

from slime_hookspecs import hookimpl


def tool_call(prompt: str) -> str:
    code = f"print({prompt.rstrip('=')})"
    return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}},
                                      separators=(",", ":")) + "</tool_call>"


@hookimpl
def slime_register_rollout_engines() -> list[Any]:
    from slime_agent.testing import forced_first_turn_engine

    return [forced_first_turn_engine("forced_python", tool_call,
                                     "local engine whose first turn calls the python tool")]
