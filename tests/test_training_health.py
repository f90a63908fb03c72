"""Issue 38, item 1: a finite but huge reward no longer poisons the weights silently.

With the reward bound off (``rollout.max_abs_reward = 0``) a reward of 1e308 overflows its
group's advantages to NaN. The step is skipped (no optimizer step, no weight sync), the run
goes on with finite weights and checkpoints; ``train.max_consecutive_skipped_steps`` skipped
steps in a row stop the run with a non-zero exit naming the first bad step.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import torch
from slime_hookspecs import hookimpl

from tests.cli_support import core, tiny_run, write_toml
from tests.conftest import read_metrics, reward_record

HUGE = 1e308


class HugeRewardAt:
    """Rewards 1e308 to the first sample of each rollout (of 8) in ``steps`` (0 elsewhere); records
    the weight versions synced."""

    def __init__(self, steps: set[int]) -> None:
        self.steps = steps
        self.synced: list[int] = []

    def reward(self, sample: Any) -> float:
        bad = sample.rollout_id in self.steps and sample.index % 8 == 0  # one per rollout
        return HUGE if bad else 0.0

    @hookimpl
    def slime_register_reward_functions(self) -> Any:
        return reward_record("huge_at", self.reward)

    @hookimpl
    def slime_after_weight_sync(self, config: Any, version: int, stats: Any) -> None:
        self.synced.append(version)


def _finite(checkpoint: Path) -> bool:
    from safetensors.torch import load_file

    state = load_file(checkpoint / "trainer" / "model.safetensors")
    return all(bool(torch.isfinite(v).all()) for v in state.values())


def test_a_huge_reward_skips_its_step_not_the_weights(run_slime, base_config, capsys) -> None:
    base_config["run"].update(num_rollouts=3, save_interval=1)
    # the bound off: the trainer must hold
    base_config["rollout"].update(max_abs_reward=0.0, reward="huge_at")
    base_config["data"].pop("eval_path")
    plugin = HugeRewardAt({1})
    run_dir = run_slime(base_config, plugins=[plugin])
    rows = read_metrics(run_dir)
    assert [r["train/skipped_steps"] for r in rows] == [0.0, 1.0, 0.0]
    assert rows[1]["train/nonfinite_advantages"] == 1.0
    for r in (rows[0], rows[2]):  # the healthy steps trained on finite numbers
        assert math.isfinite(r["train/loss"]) and math.isfinite(r["train/grad_norm"])
    # no sync for the skipped step: versions 0 (start), 1 (step 0), 2 (step 2)
    assert plugin.synced == [0, 1, 2]
    ckpts = sorted((run_dir / "checkpoints").glob("step_*"))
    assert ckpts and all(_finite(c) for c in ckpts)
    err = capsys.readouterr().err
    assert err.count("optimizer step skipped, non-finite advantages") == 1


PLUGIN = """
from slime_hookspecs import RewardFunctionRecord, hookimpl

@hookimpl
def slime_register_reward_functions():
    return RewardFunctionRecord(name="huge", summary="1e308 for every fourth sample",
                                factory=lambda config: lambda s: 1e308 if s.index % 4 == 0 else 0.0)
"""


def test_consecutive_skips_stop_the_run_naming_the_first(tmp_path: Path, tokenizer_dir) -> None:
    (tmp_path / "hugereward.py").write_text(textwrap.dedent(PLUGIN))
    data = tiny_run(tmp_path, tokenizer_dir, run={"plugin_modules": ["hugereward"],
                                                  "num_rollouts": 4, "save_interval": 1},
                    rollout={"max_abs_reward": 0.0, "reward": "huge"},
                    train={"max_consecutive_skipped_steps": 2})
    res = core("run", "--config", str(write_toml(tmp_path / "run.toml", data)),
               "--plugins", "slime_grpo", env={"PYTHONPATH": str(tmp_path)})
    assert res.returncode != 0, res.stderr[-2000:]
    assert "training stopped: 2 consecutive steps skipped" in res.stderr
    assert "the first bad step was step 0: non-finite advantages" in res.stderr
    assert "run completed" not in res.stderr
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # the rows of both skipped steps, then the stop
    assert all(r["train/skipped_steps"] == 1.0 for r in rows)
    assert all(_finite(c) for c in (tmp_path / "run" / "checkpoints").glob("step_*"))
