"""Issue 40's rule, kept: the core runs records and owns no named choice. No module of
``slime_core`` registers a record (a ``slime_register_*`` hook implementation) or imports a
plugin package, function-local imports included: named choices live in plugins (the standard
ones in slime-std, loaded by default)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "core" / "slime_core"


def _plugin_packages() -> set[str]:
    names = set()
    for pyproject in REPO.glob("plugins/*/pyproject.toml"):
        meta = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        include = meta.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {})
        for pattern in include.get("include", []) or [pyproject.parent.name]:
            names.add(pattern.rstrip("*").rstrip("."))
    return names


def _modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_the_core_registers_no_record() -> None:
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("slime_register_"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: def {node.name}")
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.startswith("slime_register_"):
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: {target.id} = ...")
    assert not found, ("the core registers records (move them to a plugin, e.g. slime-std):\n"
                       + "\n".join(found))


def test_the_core_imports_no_plugin() -> None:
    plugins = _plugin_packages()
    assert {"slime_std", "slime_grpo", "slime_agent"} <= plugins
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in plugins:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert not found, "the core imports plugin packages:\n" + "\n".join(found)
