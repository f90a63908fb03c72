"""The ``core`` CLI: listing commands, JSON output, torch-free start, scaffolding."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from slime_core.cli.main import cli
from slime_hookspecs.specs import hook_names

REPO = Path(__file__).resolve().parents[2]


def _catalog_hooks() -> set[str]:
    """Every hook named in DESIGN.md section 4 (falls back to the spec list outside the repo)."""
    design = REPO.parent / "shared" / "DESIGN.md"
    if not design.is_file():
        return set(hook_names())
    text = design.read_text().split("## 4.")[1].split("## 5.")[0]
    names = set(re.findall(r"`(slime_[a-z_]+)", text))
    # "slime_before_rollout`/`slime_after_rollout" style pairs are captured individually
    return names


def test_hooks_json_lists_every_catalog_hook() -> None:
    res = CliRunner().invoke(cli, ["hooks", "--json", "--disable-plugin-autoload"])
    assert res.exit_code == 0, res.output
    listed = {h["name"] for h in json.loads(res.output)}
    missing = _catalog_hooks() - listed
    assert not missing, f"hooks of DESIGN.md section 4 missing from `core hooks`: {missing}"


def test_hooks_shows_call_order_with_locations() -> None:
    res = CliRunner().invoke(cli, ["hooks", "slime_generate", "--disable-plugin-autoload"])
    assert res.exit_code == 0, res.output
    assert "[firstresult]" in res.output
    order = re.findall(r"^\s+\d+\. (\S+)(?: \(([^)]*)\))?\s+\S+:\d+$", res.output, re.M)
    assert order[0] == ("core_observe", "wrapper")  # wrappers are entered first
    assert order[-1] == ("core_loop", "trylast")  # the built-in default is called last
    assert re.search(r"\d+\. core_loop \(trylast\)\s+\S+loop_defaults.py:\d+", res.output)
    res = CliRunner().invoke(cli, ["hooks", "slime_genrate"])
    assert res.exit_code != 0 and "did you mean 'slime_generate'" in res.output


def test_hooks_unimplemented_filter() -> None:
    res = CliRunner().invoke(cli, ["hooks", "--unimplemented", "--json", "--disable-plugin-autoload"])
    names = {h["name"] for h in json.loads(res.output)}
    assert "slime_register_accelerators" not in names
    assert "slime_before_weights_read" in names


def test_plugins_all_json_and_check() -> None:
    res = CliRunner().invoke(cli, ["plugins", "--all", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["core_config"]["source"] == "builtin"
    assert "slime_add_config" in rows["core_config"]["hooks"]
    res = CliRunner().invoke(cli, ["plugins", "--all", "--hook", "slime_register_loggers"])
    assert "core_loggers" in res.output and "core_config" not in res.output
    res = CliRunner().invoke(cli, ["plugins", "check"])
    assert res.exit_code == 0, res.output
    assert "unavailable" in res.output  # cuda has no driver here: a note, not a problem


def test_plugins_info_lists_records() -> None:
    res = CliRunner().invoke(cli, ["plugins", "info", "core_accelerators"])
    assert res.exit_code == 0, res.output
    assert "accelerators:" in res.output and "cpu:" in res.output
    res = CliRunner().invoke(cli, ["plugins", "info", "core_acelerators"])
    assert res.exit_code != 0 and "did you mean 'core_accelerators'" in res.output


def test_disable_essential_plugin_from_cli() -> None:
    res = CliRunner().invoke(cli, ["plugins", "--disable-plugin", "core_loop"])
    assert res.exit_code == 2
    assert "'core_loop' is essential to slime-core and cannot be disabled" in res.output


def test_run_without_algorithm_stops_clearly(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text("[run]\nnum_rollouts = 1\n")
    res = CliRunner().invoke(cli, ["run", "--config", str(cfg), "--disable-plugin-autoload"])
    assert res.exit_code == 1
    assert "no algorithm is installed" in res.output
    res = CliRunner().invoke(cli, ["run", "--config", str(cfg), "-o", "rollout.tempature=1"])
    assert res.exit_code == 1 and "did you mean 'rollout.temperature'" in res.output


def test_listing_commands_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from slime_core.cli.main import main\n"
        "for args in (['--help'], ['plugins', '--all', '--json'], ['hooks', '--json'], ['plugins', 'check']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "    assert 'torch' not in sys.modules, args\n"
        "print('TORCH-FREE')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "TORCH-FREE" in out.stdout, out.stderr[-3000:]


def test_plugins_new_scaffold_passes_its_own_test(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["plugins", "new", "my-reward", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    root = tmp_path / "slime-my-reward"
    text = (root / "pyproject.toml").read_text()
    assert 'name = "slime-my-reward"' in text and "[project.entry-points.slime]" in text
    assert 'my_reward = "slime_my_reward.plugin"' in text
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
                         capture_output=True, text=True, env=env, timeout=120, cwd=root)
    assert out.returncode == 0, out.stdout + out.stderr
    res = CliRunner().invoke(cli, ["plugins", "new", "my-reward", "--dir", str(tmp_path)])
    assert res.exit_code == 2 and "already exists" in res.output
    res = CliRunner().invoke(cli, ["plugins", "new", "9bad name", "--dir", str(tmp_path)])
    assert res.exit_code == 2 and "must start with a letter" in res.output


def test_run_reports_bad_inputs_in_one_line(tmp_path: Path) -> None:
    """A missing model directory, an existing run directory and a configuration a plugin
    refuses end with ``Error: ...`` naming the key or path, not a traceback."""
    cfg = tmp_path / "run.toml"
    data = Path(__file__).resolve().parents[2] / "examples" / "tiny_arith" / "train.jsonl"
    # the data is valid: data sources are built (and checked) before the model loads
    cfg.write_text(f'[run]\nrun_dir = "{tmp_path / "run"}"\n'
                   f'[model]\npath = "{tmp_path / "no_model"}"\n'
                   f'[data]\npath = "{data}"\n')
    res = CliRunner().invoke(cli, ["run", "--config", str(cfg), "--plugins", "slime_grpo"])
    assert res.exit_code == 1, res.output
    assert "Error: FileNotFoundError: model.path:" in res.output and "no_model" in res.output
    assert "Traceback" not in res.output

    # the failed start removed the directory it made (issue 17 item 8): a retry starts afresh
    assert not (tmp_path / "run").exists()
    res = CliRunner().invoke(cli, ["run", "--config", str(cfg), "--plugins", "slime_grpo"])
    assert "Error: FileNotFoundError: model.path:" in res.output, res.output
    # an (empty) directory that was there stays; only the run's own files go
    (tmp_path / "run").mkdir()
    res = CliRunner().invoke(cli, ["run", "--config", str(cfg), "--plugins", "slime_grpo"])
    assert "Error: FileNotFoundError: model.path:" in res.output, res.output
    assert (tmp_path / "run").is_dir() and not any((tmp_path / "run").iterdir())
    # a directory that holds anything more is refused and left as it is
    (tmp_path / "run" / "metrics.jsonl").write_text("{}\n")
    res = CliRunner().invoke(cli, ["run", "--config", str(cfg), "--plugins", "slime_grpo"])
    assert "Error: FileExistsError: run directory" in res.output and "--resume" in res.output
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == "{}\n"

    # a combination a plugin's slime_configure refuses (critic-only steps without a critic)
    res = CliRunner().invoke(cli, ["run", "--config", str(cfg), "--plugins", "slime_grpo,slime_ppo",
                                   "-o", "ppo.num_critic_only_steps=2"])
    assert res.exit_code == 1 and "Error: config" in res.output, res.output
    assert "ppo.num_critic_only_steps = 2 needs a critic" in res.output


def test_listing_shows_the_library_each_plugin_runs_on(tmp_path: Path, monkeypatch) -> None:
    """``Record.library``: the installed version beside the plugin; a library that is not
    installed is listed as None in the JSON and left out of the line."""
    (tmp_path / "libplug.py").write_text(
        "from slime_hookspecs import hookimpl\n"
        "from slime_hookspecs.records import RewardFunctionRecord\n"
        "@hookimpl\n"
        "def slime_register_reward_functions():\n"
        "    return [RewardFunctionRecord(name='on_pluggy', factory=lambda config: None,\n"
        "                         library='pluggy'),\n"
        "            RewardFunctionRecord(name='on_nothing', factory=lambda config: None,\n"
        "                         library='no-such-distribution-xyz')]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib.metadata import version

    from slime_core.cli.plugins_cmd import describe_plugins
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    manager = SlimePluginManager(PluginSelection(autoload=False, modules=["libplug"])).load()
    row = next(r for r in describe_plugins(manager, include_builtin=False) if r["name"] == "libplug")
    assert row["libraries"] == {"no-such-distribution-xyz": None, "pluggy": version("pluggy")}
    monkeypatch.setattr("slime_core.cli.plugins_cmd.load_manager", lambda selection: manager)
    res = CliRunner().invoke(cli, ["plugins"])
    line = next((ln for ln in res.output.splitlines() if ln.startswith("libplug")), res.output)
    assert line.endswith(f"[on pluggy {version('pluggy')}]"), res.output
