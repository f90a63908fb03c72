"""Fixtures of the agent tests: a config with the agent sections, the built-in plugin manager,
a tiny tokenizer and a scripted engine.

The scripted engine stands in for the model only where a model cannot be made to do what a
test needs (emit a given tool call, an EOS at a given place); everything around it is real:
the :class:`EngineClient`, the tokenizer, the parser, the tools and the bubblewrap sandbox.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from slime_core.testing import write_char_tokenizer
from slime_hookspecs import GenerateOutput, SamplingParams


@pytest.fixture(scope="session")
def tiny_local_engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tiny_local_engine(rollout)`` -> ``(engine, config, manager)``: a real local engine
    over a tiny random Qwen2 and a character tokenizer, with the agent plugins' sections and
    the ``rollout`` keys given."""
    return lambda rollout: _tiny_local_engine(tmp_path_factory, rollout)


def _tiny_local_engine(tmp_path_factory: pytest.TempPathFactory,
                       rollout: dict[str, Any]) -> tuple[Any, Any, Any]:
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.testing import TINY_QWEN2
    from slime_std.engine.local_engine import LocalEngine

    tok_dir = write_char_tokenizer(tmp_path_factory.mktemp("api_tok"))
    m = SlimePluginManager(PluginSelection(plugins=["core_tools", "core_sandbox"])).load()
    cfg = load_config(build_schema(m), data={
        "model": {"tokenizer": str(tok_dir), "init_config": dict(TINY_QWEN2)},
        "rollout": rollout})
    return LocalEngine(cfg, 0, None), cfg, m


@pytest.fixture(scope="session")
def manager():
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    m = SlimePluginManager(PluginSelection(plugins=["core_tools", "core_sandbox"])).load()
    set_manager(m)
    return m


@pytest.fixture(scope="session")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_char_tokenizer(tmp_path_factory.mktemp("agent_tok"))


@pytest.fixture(scope="session")
def tokenizer(tok_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


@pytest.fixture
def agent_config(manager, tok_dir: Path):
    """``agent_config(tools={...}, rollout={...})`` -> a typed Config with every section."""
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema

    def make(**sections: dict[str, Any]) -> Any:
        data = {"model": {"tokenizer": str(tok_dir)}, **sections}
        return load_config(build_schema(manager), data=data)

    return make


class ScriptedEngine:
    """A RolloutEngine whose outputs are given: each call pops the next ids for each prompt.

    ``script`` is a list of token-id lists (one per generate request, in order); log-probs are
    ``-0.1 * (k + 1)`` for the k-th id of a request so tests can check them. Each request's
    prompt and parameters are recorded. Stop strings / EOS are the script's business: the
    finish reason is ``stop`` unless the script entry is a tuple ``(ids, reason)`` or is
    longer than ``max_new_tokens`` (cut, ``length``), as a real engine would report.
    """

    def __init__(self, script: list[Any], version: int = 3, tokenizer: Any = None) -> None:
        self.script = list(script)
        self.tokenizer = tokenizer
        self.prompts: list[list[int]] = []
        self.params: list[SamplingParams] = []
        self.version = version
        self._lock = threading.Lock()

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[GenerateOutput]:
        outs = []
        with self._lock:
            for p, sp in zip(prompts, params):
                self.prompts.append(list(p))
                self.params.append(sp)
                item = self.script.pop(0)
                full, reason = item if isinstance(item, tuple) else (item, "stop")
                ids = list(full)[: sp.max_new_tokens]
                if len(full) > sp.max_new_tokens:
                    reason = "length"
                text = (self.tokenizer.decode(ids, skip_special_tokens=True)
                        if self.tokenizer is not None else "")
                outs.append(GenerateOutput(
                    token_ids=ids, log_probs=[-0.1 * (k + 1) for k in range(len(ids))],
                    finish_reason=reason, weight_version=self.version, text=text,
                ))
        return outs

    def weight_version(self) -> int:
        return self.version

    def abort(self) -> None:
        pass

    def health(self) -> bool:
        return True

    def update_weights(self, weights: Any, version: int) -> None:
        self.version = version

    def sleep(self) -> None:
        pass

    def wake_up(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


@pytest.fixture
def scripted():
    return ScriptedEngine
