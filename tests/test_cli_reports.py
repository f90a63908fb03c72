"""Item 8 of issue 17: the CLI says what went wrong, once, and what a run did. Real ``core``."""

from __future__ import annotations

from pathlib import Path

from tests.cli_support import ARITH, core, tiny_run, write_toml


def _broken_plugin(site: Path) -> dict[str, str]:
    """An installed (dist-info on PYTHONPATH) entry-point plugin whose import fails."""
    dist = site / "slime_broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: slime-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[slime]\nbroken = slime_broken_mod\n")
    (site / "slime_broken_mod.py").write_text("import no_such_module_for_slime\n")
    return {"PYTHONPATH": str(site)}


def test_failed_autoload_warns_and_check_fails(tmp_path) -> None:
    env = _broken_plugin(tmp_path / "site")
    res = core("plugins", env=env)
    assert res.returncode == 0
    assert res.stderr.count('plugin "broken"') == 1
    assert ("failed to load and is skipped: ModuleNotFoundError: No module named "
            "'no_such_module_for_slime'") in res.stderr
    res = core("plugins", "check", env=env)
    assert res.returncode == 1
    assert 'problem: plugin "broken" from slime-broken 0.1 failed to load' in res.stderr
    assert "failed to load (broken)" in res.stderr


def test_check_reports_unavailable_plugins_as_info() -> None:
    res = core("plugins", "check")
    assert res.returncode == 0, res.stderr
    assert "info: plugin 'ascend_npu' is unavailable on this host: torch_npu" in res.stdout
    assert res.stdout.rstrip().splitlines()[-1].endswith("unavailable here (info above), no problems")
    assert "note: sandbox 'local' memory:" in res.stdout
    assert "unavailable on this host" in core("plugins", "check", "--help").stdout


def test_unknown_disabled_plugin_is_a_usage_error() -> None:
    res = core("plugins", "--disable-plugin", "nope")
    assert res.returncode == 2
    assert "no plugin named 'nope'" in res.stderr and "core_loop" in res.stderr
    res = core("plugins", "--disable-plugin", "slime_gpro")
    assert "did you mean 'slime_grpo'?" in res.stderr


def test_override_errors_name_the_override(tmp_path, tokenizer_dir) -> None:
    cfg = write_toml(tmp_path / "run.toml", tiny_run(tmp_path, tokenizer_dir))
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo",
               "-o", "rollout.temperature=abc")
    assert res.returncode == 1
    assert "(from the override -o rollout.temperature=abc)" in res.stderr
    assert str(cfg) not in res.stderr
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo", "-o", "rolout.n=1")
    assert "unknown config section 'rolout'" in res.stderr and "-o rolout.n=1" in res.stderr


def test_bad_reward_name_is_one_clean_error(tmp_path, tokenizer_dir) -> None:
    cfg = write_toml(tmp_path / "run.toml", tiny_run(
        tmp_path, tokenizer_dir, rollout={"reward": "nope"}, eval={"interval": 0}))
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo")
    assert res.returncode == 1
    assert "never retrieved" not in res.stderr and "Traceback" not in res.stderr
    assert "unknown reward function 'nope'" in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 3, res.stderr
    assert not (tmp_path / "run").exists()


def test_a_failed_start_leaves_no_run_directory(tmp_path, tokenizer_dir) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "label": \n')
    out = tmp_path / "runs"
    data = tiny_run(tmp_path, tokenizer_dir, data={"path": str(bad)})
    del data["run"]["run_dir"]
    data["run"]["output_dir"] = str(out)
    res = core("run", "--config", str(write_toml(tmp_path / "run.toml", data)),
               "--plugins", "slime_grpo")
    assert res.returncode == 1 and "invalid JSON" in res.stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_run_ends_with_a_summary_and_the_bar_keeps_accuracies_apart(tmp_path, tokenizer_dir) -> None:
    data = tiny_run(tmp_path, tokenizer_dir, run={"progress": True},
                    data={"eval_path": str(ARITH / "eval.jsonl")}, eval={"interval": 1})
    res = core("run", "--config", str(write_toml(tmp_path / "run.toml", data)),
               "--plugins", "slime_grpo")
    assert res.returncode == 0, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("run completed: 2 steps in "), last
    assert "final eval/accuracy " in last and "at step 2" in last
    assert last.endswith(f"run directory: {tmp_path / 'run'}")
    assert "eval_acc=" in res.stderr and "acc=" in res.stderr
    # resumed with no step left: the summary still names the run's last evaluation, read from
    # its metrics.jsonl (this process evaluated nothing), not "no held-out evaluation"
    res = core("run", "--resume", str(tmp_path / "run"), "-o", "run.progress=false")
    assert res.returncode == 0, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("run completed: 0 steps (resumed at 2) in "), last
    assert "final eval/accuracy " in last and "at step 2" in last, last
    assert "no held-out evaluation" not in last
