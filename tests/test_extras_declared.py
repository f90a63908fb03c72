"""Each package's optional dependencies are extras of that package: its ``extras.EXTRAS``
table (module -> (distribution, extra)) and its pyproject agree, none is a hard dependency,
and ``[all]`` installs every extra."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=;\[ ]", requirement, maxsplit=1)[0].lower()


@pytest.mark.parametrize(("folder", "module"), [("core", "slime_core.extras"),
                                                ("plugins/slime_std", "slime_std.extras")])
def test_pyproject_declares_each_extra_and_no_hard_dependency_on_them(folder: str,
                                                                        module: str) -> None:
    import importlib

    project = tomllib.loads((REPO / folder / "pyproject.toml").read_text(encoding="utf-8"))
    project = project["project"]
    hard = {_name(r) for r in project["dependencies"]}
    optional = project["optional-dependencies"]
    for mod, (dist, extra) in importlib.import_module(module).EXTRAS.items():
        assert dist not in hard, f"{dist} ({mod}) is a hard dependency of {project['name']}"
        assert dist in {_name(r) for r in optional[extra]}, f"extra {extra!r} does not install {dist}"
        assert extra in optional["all"][0], f"{project['name']}[all] leaves out {extra!r}"
