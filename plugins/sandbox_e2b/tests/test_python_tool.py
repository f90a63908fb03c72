"""The multi-turn python tool (``tools.enabled = ["python"]``) with ``tools.sandbox = "e2b"``:
one E2B sandbox per episode through the registry, the SDK and the stand-in.

The engine is scripted, as in core's multi-turn tests (a tiny model cannot be made to emit a
given tool call); the tool loop, parser, python tool, sandbox record, SDK and HTTP are real.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from slime_hookspecs import GenerateOutput, Sample, SamplingParams, Status

EOS = 1


def call(code: str) -> str:
    return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"


class Scripted:
    """Each generate request gets the next scripted text's ids."""

    def __init__(self, tokenizer, texts: list[str]) -> None:
        self.tok, self.texts, self.prompts = tokenizer, list(texts), []
        self._lock = threading.Lock()

    def generate(self, prompts, params):
        outs = []
        with self._lock:
            for p in prompts:
                self.prompts.append(list(p))
                text = self.texts.pop(0)
                ids = self.tok(text, add_special_tokens=False)["input_ids"] + [EOS]
                outs.append(GenerateOutput(token_ids=ids, log_probs=[-0.5] * len(ids), text=text,
                                           finish_reason="stop", weight_version=0))
        return outs


def test_two_python_calls_share_one_sandbox_and_it_is_killed(server, tmp_path: Path):
    from slime_agent.multiturn import generate_with_tools
    from slime_agent.runtime import AgentRuntime
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.rollout.engine_client import EngineClient
    from slime_core.session import resolve
    from slime_core.testing import write_char_tokenizer
    from transformers import AutoTokenizer

    tok_dir = write_char_tokenizer(tmp_path / "tok")
    manager, config = resolve(PluginSelection(plugins=["sandbox_e2b", "core_tools"]), None, (), {
        "model": {"tokenizer": str(tok_dir)},
        "tools": {"enabled": ["python"], "sandbox": "e2b", "timeout": 20,
                  "sandbox_options": {"template": "code"}},
        "e2b": {"api_url": server.url, "sandbox_url": server.url,
                "api_key_env": "SLIME_TEST_E2B_KEY"},
    })
    set_manager(manager)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    engine = Scripted(tok, [
        call("open('n.txt', 'w').write(str(123 * 45))\nprint('saved')"),
        call("print(open('n.txt').read())"),  # the file of the first call: same sandbox
        "<answer>5535</answer>",
    ])
    prompt = "Q: 123*45="
    sample = Sample(prompt=prompt, tokens=tok(prompt, add_special_tokens=False)["input_ids"],
                    label="5535")
    rt = AgentRuntime(config, manager, tok)
    out = asyncio.run(generate_with_tools(config, sample, SamplingParams(max_new_tokens=600),
                                          EngineClient(engine), rt))
    out.validate()
    assert out.status == Status.COMPLETED and out.metadata["tool_errors"] == {}, out.response
    assert out.metadata["tool_calls"] == 2 and out.metadata["turns"] == 3
    assert "<tool_response>\nsaved\n" in out.response and "<tool_response>\n5535\n" in out.response
    # observations are masked, the model's turns trainable
    assert 0 in out.loss_mask and out.loss_mask[0] == 1 and out.loss_mask[-1] == 1
    (created,) = server.created  # one sandbox for the episode, from tools.sandbox_options
    assert created["templateID"] == "code"
    assert len(server.killed) == 1 and not server.boxes  # closed at the episode's end
    starts = [p for m, p in server.calls if p == "/process.Process/Start"]
    assert len(starts) == 2
