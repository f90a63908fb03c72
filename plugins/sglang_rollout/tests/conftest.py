"""Fixtures: SGLang-shaped HTTP servers on 127.0.0.1 and configs with an ``[sglang]`` section."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_PLUGIN_ROOT = str(Path(__file__).resolve().parents[1])
if _PLUGIN_ROOT not in sys.path:
    sys.path.insert(0, _PLUGIN_ROOT)

from sglang_rollout.fake_server import FakeSGLangServer, ScriptedEngine  # noqa: E402


def resolve_config(data: dict[str, dict[str, Any]], plugins: tuple[str, ...] = ("sglang_rollout",)) -> Any:
    """A resolved config (``slime_configure`` fired) with the plugin's ``[sglang]`` section."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    return resolve(PluginSelection(plugins=list(plugins)), None, (), data)


ARITH = Path(__file__).resolve().parents[3] / "examples" / "tiny_arith"


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from slime_core.testing import write_char_tokenizer

    return write_char_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def base_config(tokenizer_dir: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """A 2-step GRPO run of a ~50k-parameter Qwen2 on the tiny arithmetic prompts."""
    from slime_core.testing import TINY_QWEN2

    return {
        "run": {"num_rollouts": 2, "run_dir": str(tmp_path / "run"), "progress": False,
                "loggers": ["jsonl"]},
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6},
        "train": {"lr": 1e-3},
    }


@pytest.fixture
def resolve() -> Callable[..., Any]:
    """``resolve(data, plugins=("sglang_rollout",))`` -> ``(manager, config)``."""
    return resolve_config


@pytest.fixture
def run_in_agreement() -> Callable[..., Path]:
    """``run_in_agreement(base_config, url, transport, plugins)`` -> the run directory of the
    2-step GRPO run of ``base_config`` with ``rollout.engine = "sglang"`` served at ``url``,
    checked: every training step's trainer log-probs agree with the served ones
    (``train/mismatch_abs_logprob_diff`` < 1e-4), which holds only if token ids and log-probs
    are paired right and every sync reached the server."""
    import json

    from slime_core.runner.driver import run_training

    def run(base_config: dict[str, Any], url: str, transport: str,
            plugins: tuple[str, ...]) -> Path:
        base_config["rollout"]["engine"] = "sglang"
        base_config["weights"] = {"transport": transport}
        base_config["sglang"] = {"urls": [url]}
        run_dir = Path(run_training(*resolve_config(base_config, plugins)))
        steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        train_steps = [m for m in steps if "train/mismatch_abs_logprob_diff" in m]
        assert len(train_steps) == 2
        for m in train_steps:
            assert m["train/mismatch_abs_logprob_diff"] < 1e-4, m
        return run_dir

    return run


@pytest.fixture
def fake_server() -> Iterator[Callable[..., FakeSGLangServer]]:
    """``fake_server(engine=None, **kw)`` -> a started server (ScriptedEngine by default)."""
    started: list[FakeSGLangServer] = []

    def start(engine: Any = None, **kw: Any) -> FakeSGLangServer:
        srv = FakeSGLangServer(engine if engine is not None else ScriptedEngine(), **kw).start()
        started.append(srv)
        return srv

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make_engine(urls, index=0, rollout=None, **sglang_keys)`` -> an SGLangEngine, shut
    down afterwards; ``rollout``: more ``[rollout]`` keys."""
    from sglang_rollout.engine import SGLangEngine

    made: list[Any] = []

    def make(urls: list[str], index: int = 0, num_engines: int | None = None,
             rollout: dict[str, Any] | None = None, **sglang: Any) -> Any:
        _, config = resolve_config({
            "run": {"run_dir": str(tmp_path / "run")},
            "rollout": {"engine": "sglang", "num_engines": num_engines or len(urls),
                        **(rollout or {})},
            "sglang": {"urls": urls, **sglang},
        })
        engine = SGLangEngine(config, index)
        made.append(engine)
        return engine

    yield make
    for e in made:
        e.shutdown()
