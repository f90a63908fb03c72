"""Third-party publishing, for real: build wheels, pip install into a fresh venv, use its CLI.

The venv inherits the already installed packages (``--system-site-packages``) so slime-core
and slime-hookspecs come from the development install; the example plugin and a broken one
are built as wheels and installed with pip, with no network.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.inherit_site import inherit

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "plugins" / "slime-answer-format"


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:  # noqa: ANN003
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def _broken_plugin(root: Path) -> Path:
    pkg = root / "slime-broken-example"
    (pkg / "slime_broken_example").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "slime-broken-example"
        version = "0.0.1"
        [project.entry-points.slime]
        broken_example = "slime_broken_example.plugin"
        [tool.setuptools.packages.find]
        include = ["slime_broken_example*"]
    """))
    (pkg / "slime_broken_example" / "__init__.py").write_text("")
    (pkg / "slime_broken_example" / "plugin.py").write_text(
        "raise ImportError('this plugin needs libfoo, which is missing')\n"
    )
    return pkg


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("publish")
    dist = root / "dist"
    for src in (EXAMPLE, _broken_plugin(root)):
        out = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(src)])
        assert out.returncode == 0, out.stdout + out.stderr
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 2, wheels
    env_dir = root / "venv"
    out = _run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)])
    assert out.returncode == 0, out.stderr
    inherit(env_dir)  # also when this Python is itself a venv's (see tests/inherit_site.py)
    py = env_dir / "bin" / "python"
    out = _run([str(py), "-m", "pip", "install", "--no-index", "--no-deps", *map(str, wheels)])
    assert out.returncode == 0, out.stdout + out.stderr
    return py


def _core(py: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([str(py), "-m", "slime_core", *args])


def test_discovered_with_version_and_hooks(venv: Path) -> None:
    out = _core(venv, "plugins", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    good = rows["answer_format"]
    assert (good["distribution"], good["version"], good["status"]) == (
        "slime-answer-format", "0.2.0", "active")
    assert good["hooks"] == ["slime_register_commands", "slime_register_reward_functions"]


def test_broken_plugin_reported_while_the_rest_load(venv: Path) -> None:
    out = _core(venv, "plugins", "--json")
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["broken_example"]["status"] == "failed"
    assert "this plugin needs libfoo" in rows["broken_example"]["reason"]
    assert rows["answer_format"]["status"] == "active"
    check = _core(venv, "plugins", "check")
    assert check.returncode == 1
    assert 'plugin "broken_example" from slime-broken-example 0.0.1 failed to load' in check.stderr
    forced = _core(venv, "plugins", "--plugins", "broken_example")
    assert forced.returncode != 0
    assert 'Error loading plugin "broken_example" from slime-broken-example 0.0.1: ImportError' in forced.stderr


def test_disable_plugin_blocks_it(venv: Path) -> None:
    out = _core(venv, "plugins", "--json", "--disable-plugin", "answer_format")
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["answer_format"]["status"] == "blocked"
    assert rows["answer_format"]["hooks"] == []


def test_plugin_command_and_record_are_usable(venv: Path) -> None:
    out = _core(venv, "answer-format", "the answer is \\boxed{7}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"
    info = _core(venv, "plugins", "info", "answer_format")
    assert "answer_format: 1.0 when the response holds" in info.stdout
