"""Whole runs on the megatron backend (local executor): weight sync verified, exact resume.

4 GRPO steps straight equal 2 steps + ``--resume`` + 2 steps, metric for metric, as the core's
resume test checks for the torch backend; the checkpoint holds Megatron's per-rank state and
an HF copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mg_support import PLUGINS, REPO

ARITH = REPO / "examples" / "tiny_arith"
COMPARED = ("rollout/reward_mean", "rollout/response_length_mean", "train/loss",
            "train/grad_norm", "train/pg_loss", "train/entropy", "eval/accuracy")


def _run(data: dict[str, Any], resume: str | None = None) -> Path:
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    manager, config = resolve(PluginSelection(plugins=list(PLUGINS)), None, (), data)
    return run_training(manager, config, resume_dir=resume)


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _config(tmp_path: Path, run_dir: str, num_rollouts: int) -> dict[str, Any]:
    from slime_core.testing import TINY_QWEN2, write_char_tokenizer

    tok = tmp_path / "tok"
    if not tok.exists():
        write_char_tokenizer(tok)
    return {
        "run": {"num_rollouts": num_rollouts, "save_interval": 2, "run_dir": str(tmp_path / run_dir),
                "progress": False, "loggers": ["jsonl"]},
        "model": {"tokenizer": str(tok), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl"), "eval_path": str(ARITH / "eval.jsonl")},
        "eval": {"interval": 2},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6,
                    "temperature": 1.0},
        "train": {"lr": 1e-3, "backend": "megatron"},
        "weights": {"verify": True},
    }


@pytest.mark.slow
def test_four_steps_equal_two_plus_resume(tmp_path: Path) -> None:
    straight = _run(_config(tmp_path, "a", 4))
    part = _run(_config(tmp_path, "b", 2))
    ckpt = part / "checkpoints" / "step_000002" / "trainer"
    assert (ckpt / "megatron" / "mp_rank_00_000" / "model_optim.pt").is_file()
    assert (ckpt / "hf" / "config.json").is_file()
    _run(_config(tmp_path, "b", 4), resume=str(part))
    a, b = _metrics(straight), _metrics(part)
    assert [m["step"] for m in a] == [m["step"] for m in b]
    assert all(m.get("perf/weight_sync_verified") == 1.0 for m in b if "train/loss" in m)
    for ma, mb in zip(a, b, strict=True):
        for key in COMPARED:
            if key in ma:
                assert mb[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-6), (ma["step"], key)
