"""A plugin module for test_core_run.py: the rollout engine ``forced_mcp_calculator``, the real
local engine (the tiny_arith model) whose first turn of every episode is forced to be a call of
the MCP server's ``calculator`` on the prompt's sum. The forced ids carry the model's own
log-probs (``score_tokens``); every later turn is the model's real generation."""

from __future__ import annotations

import json
from typing import Any

from slime_hookspecs import GenerateOutput, RolloutEngineRecord, hookimpl


def tool_call(prompt: str) -> str:
    return "<tool_call>" + json.dumps(
        {"name": "calculator", "arguments": {"expression": prompt.rstrip("=")}},
        separators=(",", ":")) + "</tool_call>"


def _engine(config: Any, engine_index: int = 0, accelerator: Any = None) -> Any:
    from slime_core.engine.local_engine import LocalEngine

    class ForcedCalculator(LocalEngine):
        def generate(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
            tok = self.tokenizer
            outs: list[Any] = [None] * len(prompts)
            real = [i for i, p in enumerate(prompts) if "<tool_response>" in tok.decode(p)]
            forced = [i for i in range(len(prompts)) if i not in real]
            if forced:
                ids = [tok(tool_call(tok.decode(prompts[i])), add_special_tokens=False)["input_ids"]
                       for i in forced]
                lps = self.score_tokens([prompts[i] + x for i, x in zip(forced, ids, strict=True)],
                                        [len(x) for x in ids])
                for i, x, lp in zip(forced, ids, lps, strict=True):
                    outs[i] = GenerateOutput(token_ids=x, log_probs=lp, finish_reason="stop",
                                             weight_version=self.weight_version(),
                                             text=tok.decode(x))
            if real:
                for i, out in zip(real, super().generate([prompts[i] for i in real],
                                                         [params[i] for i in real]), strict=True):
                    outs[i] = out
            return outs

    return ForcedCalculator(config, engine_index, accelerator)


@hookimpl
def slime_register_rollout_engines() -> list[RolloutEngineRecord]:
    return [RolloutEngineRecord(name="forced_mcp_calculator", factory=_engine,
                                summary="local engine whose first turn calls the MCP calculator")]
