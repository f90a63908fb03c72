"""CI runs exactly the README's set-up and test commands (``.ci/run``), in a fresh venv."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _first_block_after(heading: str, text: str) -> str:
    section = text.split(heading, 1)[1]
    match = re.search(r"```bash\n(.*?)\n```", section, re.DOTALL)
    assert match, f"README.md: no bash block after {heading!r}"
    return match.group(1).strip()


def test_ci_runs_the_readme_commands_verbatim_in_a_venv() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci.splitlines()]
    for heading in ("## Set up", "## Test"):
        command = _first_block_after(heading, readme)
        assert command in ci_lines, f".ci/run does not run README's {heading[3:]} command:\n{command}"
    venv = next(i for i, line in enumerate(ci_lines) if re.match(r"python3? -m venv ", line))
    setup = ci_lines.index(_first_block_after("## Set up", readme))
    assert venv < setup and any(line.startswith("source ") and "/bin/activate" in line
                                for line in ci_lines[venv:setup])


def test_setup_installs_every_package_of_the_repository() -> None:
    """The set-up command names a requirements file, not packages, so adding a plugin changes
    ``requirements.txt`` (one line) and neither README.md nor .ci/run; every folder with a
    ``pyproject.toml`` that declares a project is in it, as an editable install."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert _first_block_after("## Set up", readme) == "pip install -r requirements.txt"
    lines = [line.split("#", 1)[0].strip()
             for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()]
    listed = {line[len("-e ./"):].split("[", 1)[0] for line in lines if line.startswith("-e ./")}
    packages = {str(p.parent.relative_to(REPO)) for p in REPO.glob("*/pyproject.toml")} | {
        str(p.parent.relative_to(REPO)) for p in REPO.glob("plugins/*/pyproject.toml")}
    packages = {p for p in packages
                if "[project]" in (REPO / p / "pyproject.toml").read_text(encoding="utf-8")}
    assert listed == packages, (
        f"requirements.txt misses {sorted(packages - listed)} / lists unknown {sorted(listed - packages)}")
    assert "-r requirements-dev.txt" in lines and any(line.startswith("torch") for line in lines)


def test_ci_type_checks_every_package() -> None:
    """``.ci/run`` runs ``mypy`` after the set-up and before the tests, and ``[tool.mypy]``
    checks every package of the repository (``files``) against the others' sources
    (``mypy_path``: the editable installs carry no py.typed, so without it an import of
    ``slime_core`` from a plugin would be ``Any``)."""
    import tomllib

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert "mypy" in ci_lines
    setup = ci_lines.index(_first_block_after("## Set up", readme))
    test = ci_lines.index(_first_block_after("## Test", readme))
    assert setup < ci_lines.index("mypy") < test
    conf = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    roots = {p.removeprefix("$MYPY_CONFIG_FILE_DIR/") for p in conf["mypy_path"]}
    lines = [line.split("#", 1)[0].strip()
             for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()]
    packages = {line[len("-e ./"):].split("[", 1)[0] for line in lines if line.startswith("-e ./")}
    assert roots == packages, f"mypy_path misses {sorted(packages - roots)}"
    wanted = {str(init.parent.relative_to(REPO)) for p in packages
              for init in (REPO / p).glob("*/__init__.py") if init.parent.name != "tests"}
    assert set(conf["files"]) == wanted, (
        f"[tool.mypy] files misses {sorted(wanted - set(conf['files']))} / lists unknown "
        f"{sorted(set(conf['files']) - wanted)}")
    dev = (REPO / "requirements-dev.txt").read_text(encoding="utf-8")
    assert re.search(r"^mypy==", dev, re.MULTILINE)
