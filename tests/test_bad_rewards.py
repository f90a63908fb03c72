"""Item 6 of issue 17: rewards are validated where they enter, errors name who and which sample.

Each test runs the real ``core run`` on the tiny model with a reward plugin module written to
``tmp_path`` (``run.plugin_modules``).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.cli_support import core, tiny_run, write_toml

PLUGIN = """
from slime_hookspecs import hookimpl
from slime_hookspecs.records import RewardFunctionRecord

VALUE = {value}

@hookimpl
def slime_register_reward_functions():
    return [RewardFunctionRecord(name="always_bad", factory=lambda config: lambda s: VALUE,
                                 summary="test reward"),
            RewardFunctionRecord(name="half_bad", summary="test reward",
                                 factory=lambda config: lambda s: VALUE if s.index % 2 == 0 else 0.5)]
"""

# the deprecated alias, still checked the same way (and named as the hook in the message)
HOOK = """
from slime_hookspecs import hookimpl

@hookimpl
def slime_reward(config, sample):
    return {value} if sample.index % 2 == 0 else 0.5
"""


def _run(tmp_path: Path, tokenizer_dir: Path, value: str, reward: str = "half_bad",
         plugin: str = PLUGIN) -> tuple[int, str, Path]:
    (tmp_path / "badreward.py").write_text(textwrap.dedent(plugin.format(value=value)))
    data = tiny_run(tmp_path, tokenizer_dir, run={"plugin_modules": ["badreward"]},
                    rollout={"reward": reward})
    cfg = write_toml(tmp_path / "run.toml", data)
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo",
               env={"PYTHONPATH": str(tmp_path)})
    return res.returncode, res.stderr, tmp_path / "run"


def test_nan_reward_fails_its_sample_and_is_summarised(tmp_path, tokenizer_dir) -> None:
    code, err, run_dir = _run(tmp_path, tokenizer_dir, "float('nan')")
    assert code == 0, err[-3000:]
    assert "numerator" not in err
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["rollout/failed"] == 2.0 and rows[0]["rollout/failed/reward"] == 2.0
    # the log says how many failed and why, naming the record, its plugin and the sample
    line = next(ln for ln in err.splitlines() if "rollout 0: 2 of 4 samples failed" in ln)
    assert "reward function 'half_bad' (plugin 'badreward') returned nan" in line
    assert "sample group=" in line and "index=0" in line


def test_string_reward_is_refused_naming_the_record(tmp_path, tokenizer_dir) -> None:
    code, err, _ = _run(tmp_path, tokenizer_dir, "'1.0'", reward="always_bad")
    assert code == 1
    assert "every sample of step 0 failed" in err
    assert "reward function 'always_bad' (plugin 'badreward') returned '1.0' (str)" in err
    assert "Traceback" not in err


def test_text_and_inf_rewards_name_the_plugin(tmp_path, tokenizer_dir) -> None:
    code, err, _ = _run(tmp_path, tokenizer_dir, "'correct'")
    assert code == 0, err[-3000:]
    assert "reward function 'half_bad' (plugin 'badreward') returned 'correct' (str)" in err
    (tmp_path / "inf").mkdir()
    code, err, _ = _run(tmp_path / "inf", tokenizer_dir, "float('inf')")
    assert code == 0, err[-3000:]
    assert "reward function 'half_bad' (plugin 'badreward') returned inf" in err


def test_the_deprecated_reward_hook_is_checked_and_named_too(tmp_path, tokenizer_dir) -> None:
    code, err, _ = _run(tmp_path, tokenizer_dir, "float('nan')", reward="exact", plugin=HOOK)
    assert code == 0, err[-3000:]
    assert "plugin 'badreward' hook slime_reward returned nan" in err
    assert "implements the deprecated hook slime_reward" in err
