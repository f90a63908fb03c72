"""slime-style modules (tests/slime_user) run unmodified through a real ``core run``."""

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from run_support import base_config, calls, core, metrics


def test_rm_generate_filter_post_process_and_loss(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "calls.jsonl"
    cfg = tmp_path / "c.toml"
    cfg.write_text(base_config(run_dir) + """
[slime]
custom_rm_path = "slime_user.arith_rm.custom_rm"
custom_generate_function_path = "slime_user.arith_generate.generate"
dynamic_sampling_filter_path = "slime_user.arith_filter.nonzero_std"
custom_reward_post_process_path = "slime_user.arith_train.group_norm"
custom_loss_function_path = "slime_user.arith_train.ppo_loss"
""")
    proc = core(["run", "--plugins", "slime_grpo,slime_compat", "--config", str(cfg)], log)
    assert "SGLang-compatible /generate at http://127.0.0.1:" in proc.stderr
    seen = Counter(c["fn"] for c in calls(log))
    # every generated sample went through the HTTP endpoint and the slime reward function
    assert seen["generate"] >= 2 * 4 * 4 and seen["custom_rm"] == seen["generate"]
    assert seen["filter"] >= 2 * 4 and seen["post"] == 2 and seen["loss"] >= 2
    versions = {c["weight_version"] for c in calls(log) if c["fn"] == "generate"}
    assert versions == {"0", "1"}  # the endpoint reports the engine's synced weights
    rows = metrics(run_dir)
    assert len(rows) == 2 and all("train/pg_loss" in r and "train/pg_clipfrac" in r for r in rows)
    kept = [c["keep"] for c in calls(log) if c["fn"] == "filter"]
    dropped = sum(r.get("rollout/dropped/all_same", 0) for r in rows)
    assert dropped == kept.count(False)  # every False of the slime filter dropped its group


def test_group_rm_custom_rollout_and_convert(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "calls.jsonl"
    cfg = tmp_path / "c.toml"
    cfg.write_text(base_config(run_dir) + """
[slime]
custom_rm_path = "slime_user.arith_rm.group_rm"
group_rm = true
rollout_function_path = "slime_user.arith_rollout.generate_rollout"
custom_convert_samples_to_train_data_path = "slime_user.arith_train.convert"
""")
    core(["run", "--plugins", "slime_grpo,slime_compat", "--config", str(cfg)], log)
    seen = Counter(c["fn"] for c in calls(log))
    assert seen["rollout"] == 2 and seen["group_rm"] == 2 * 4 and seen["convert"] == 2
    rows = metrics(run_dir)
    assert [r["rollout/custom_calls"] for r in rows] == [1.0, 2.0]  # RolloutFnTrainOutput.metrics
    assert all(r["rollout/samples"] == 16 for r in rows if "rollout/samples" in r)


def test_a_rollout_function_is_refused_in_fully_async_mode(tmp_path: Path) -> None:
    # the fully-async generator never calls a whole-batch rollout function: refused, not skipped
    cfg = tmp_path / "c.toml"
    cfg.write_text(base_config(tmp_path / "run") + """
[slime]
rollout_function_path = "slime_user.arith_rollout.generate_rollout"
""")
    proc = subprocess.run(
        [sys.executable, "-m", "slime_core", "run", "--plugins", "slime_grpo,slime_compat",
         "--config", str(cfg), "-o", "run.rollout_mode=fully_async", "-o", "run.max_staleness=2"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                          os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode != 0
    assert "[slime].rollout_function_path (slime_user.arith_rollout.generate_rollout) " \
           "replaces the whole training rollout" in proc.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
