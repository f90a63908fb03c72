"""The plugin boundary: plugin packages import ``slime_hookspecs``, ``slime_core.api`` and
third-party libraries, never another ``slime_core`` module, and declare what they import.

Covers every first-party plugin (``plugins/*``) and the example third-party plugins
(``examples/plugins/*``); their tests may reach into core (they test the wiring).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLIC = "slime_core.api"


def _package_dirs() -> list[Path]:
    found = [p.parent for p in sorted(REPO.glob("plugins/*/pyproject.toml"))]
    found += [p.parent for p in sorted(REPO.glob("examples/plugins/*/pyproject.toml"))]
    return found


def _sources(package_dir: Path) -> list[Path]:
    return [p for p in sorted(package_dir.rglob("*.py"))
            if "tests" not in p.relative_to(package_dir).parts
            and not any(part.startswith(".") or part in {"build", "ci"}
                        for part in p.relative_to(package_dir).parts)]


def internal_imports(path: Path) -> list[str]:
    """``file:line: module`` for each import of a ``slime_core`` module other than the API."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bad: list[str] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "slime_core":
                names = [f"slime_core.{a.name}" for a in node.names]
            else:
                names = [node.module]
        for name in names:
            if (name == "slime_core" or name.startswith("slime_core.")) and name != PUBLIC:
                bad.append(f"{path}:{node.lineno}: {name}")
    return bad


def _imports_core(package_dir: Path) -> bool:
    return any(re.search(r"^\s*(from|import)\s+slime_core\b", p.read_text(encoding="utf-8"),
                         re.MULTILINE) for p in _sources(package_dir))


def _declared(package_dir: Path) -> set[str]:
    meta = tomllib.loads((package_dir / "pyproject.toml").read_text(encoding="utf-8"))
    deps = meta.get("project", {}).get("dependencies", [])
    return {re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}


@pytest.mark.parametrize("package_dir", _package_dirs(), ids=lambda p: p.name)
def test_plugin_imports_only_the_public_api(package_dir: Path) -> None:
    bad = [b for src in _sources(package_dir) for b in internal_imports(src)]
    assert not bad, (
        "plugin modules may import only slime_core.api from slime_core (add what is missing to "
        "slime_core/api.py with a docstring):\n" + "\n".join(bad)
    )


@pytest.mark.parametrize("package_dir", _package_dirs(), ids=lambda p: p.name)
def test_plugin_declares_what_it_imports(package_dir: Path) -> None:
    declared = _declared(package_dir)
    assert "slime-hookspecs" in declared, f"{package_dir.name} must depend on slime-hookspecs"
    if _imports_core(package_dir):
        assert "slime-core" in declared, (
            f"{package_dir.name} imports slime_core.api but does not declare slime-core"
        )


def test_the_check_catches_a_planted_internal_import(tmp_path: Path) -> None:
    src = tmp_path / "planted.py"
    src.write_text(
        "import slime_core.api\n"
        "from slime_core.api import whiten\n"
        "from slime_core.trainkit.batching import micro_batches\n"
        "from slime_core import context\n"
        "def f():\n"
        "    import slime_core.rollout.engine_client\n",
        encoding="utf-8",
    )
    bad = internal_imports(src)
    assert [b.split(": ", 1)[1] for b in bad] == [
        "slime_core.trainkit.batching", "slime_core.context", "slime_core.rollout.engine_client",
    ]


def test_every_public_name_resolves_and_is_documented() -> None:
    import slime_core.api as api

    doc = (REPO / "docs" / "plugin_api.md").read_text(encoding="utf-8")
    for name in api.__all__:
        assert getattr(api, name) is not None
        assert re.search(rf"`{name}[`(]", doc), f"docs/plugin_api.md does not document slime_core.api.{name}"
    with pytest.raises(AttributeError, match="public names"):
        api.not_a_public_name  # noqa: B018


def test_editors_see_exactly_the_exports() -> None:
    """The ``if TYPE_CHECKING:`` imports of ``slime_core.api`` (what editors and mypy follow)
    name exactly the lazily resolved exports, from the same modules."""
    import slime_core.api as api

    tree = ast.parse((REPO / "core" / "slime_core" / "api.py").read_text(encoding="utf-8"))
    (block,) = [n for n in tree.body if isinstance(n, ast.If)
                and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"]
    seen = {(alias.asname or alias.name): (node.module, alias.name)
            for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert seen == api._EXPORTS
