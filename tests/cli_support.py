"""Helpers for tests that run the real ``core`` command in a subprocess on a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from slime_core.testing import TINY_QWEN2

ROOT = Path(__file__).resolve().parents[1]
ARITH = ROOT / "examples" / "tiny_arith"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def write_toml(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def tiny_run(tmp_path: Path, tokenizer_dir: Path, **changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A 2-step GRPO run of the tiny Qwen2; ``changes`` update sections (``run={...}``)."""
    data: dict[str, dict[str, Any]] = {
        "run": {"num_rollouts": 2, "run_dir": str(tmp_path / "run"), "progress": False,
                "loggers": ["jsonl"]},
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 2, "max_new_tokens": 4},
        "train": {"lr": 1e-3},
    }
    for sec, values in changes.items():
        data.setdefault(sec, {}).update(values)
    return data


def core(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m slime_core ARGS`` (the ``core`` command) with ``env`` added."""
    environ = {**os.environ, "SLIME_DISABLE_PLUGIN_AUTOLOAD": "", **(env or {})}
    environ.pop("SLIME_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "slime_core", *args], cwd=cwd or ROOT,
                          env=environ, capture_output=True, text=True, timeout=timeout)
