"""No package cycle inside ``slime_core``: layers import only downward.

Every ``import`` of every module is read with :mod:`ast`, those inside functions and
``TYPE_CHECKING`` blocks included (a function-local import hides a cycle from the interpreter at
start-up, not from the design). A unit is a direct child of ``slime_core``: a subpackage
(``rollout``, ``executors``, ...) or a top-level module (``api``, ``context``, ...). A failure
names the cycle and the file and line of each import that closes it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import slime_core

ROOT = Path(slime_core.__file__).parent

# (importing unit, imported unit) -> first "file:line" that imports it
Edges = dict[tuple[str, str], str]


def _unit(module: str) -> str:
    """``slime_core.rollout.manager`` -> ``rollout``; ``slime_core`` itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path, root: Path) -> tuple[str, str]:
    """The dotted name of ``path`` and the package its relative imports start from."""
    rel = path.relative_to(root.parent).with_suffix("")
    name = ".".join(rel.parts)
    if path.name == "__init__.py":
        name = name.rsplit(".", 1)[0]
        return name, name
    return name, name.rsplit(".", 1)[0]


def _imported(node: ast.AST, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if node.module:
            yield target
        else:  # ``from . import x`` / ``from slime_core import x``: x is the module
            yield from (f"{target}.{alias.name}" for alias in node.names)


def import_edges(root: Path = ROOT) -> Edges:
    edges: Edges = {}
    for path in sorted(root.rglob("*.py")):
        if "tests" in path.relative_to(root).parts:
            continue
        module, package = _module_of(path, root)
        source = _unit(module) if "." in module else "__init__"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, package):
                if not target.startswith("slime_core."):
                    continue
                dest = _unit(target)
                if dest != source:
                    where = f"{path.relative_to(root.parent)}:{node.lineno}"
                    edges.setdefault((source, dest), where)
    return edges


def find_cycles(edges: Edges) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected set of units; the units
    of the set follow it after a ``|`` (a set of several cycles then shows them all)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan; the unit graph is a few dozen nodes deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [[*_cycle_in(graph, c), "|", *sorted(c)] for c in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first unit (breadth-first inside it)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(found: list[str], edges: Edges) -> str:
    bar = found.index("|")
    cycle, units = found[:bar], found[bar + 1:]
    steps = [f"  {a} -> {b}  ({edges[(a, b)]})" for a, b in zip(cycle, cycle[1:])]
    return ("package cycle " + " -> ".join(cycle) + ":\n" + "\n".join(steps)
            + "\n  (units tied in cycles: " + ", ".join(units) + ")")


def test_no_package_cycle_in_core() -> None:
    edges = import_edges()
    cycles = find_cycles(edges)
    assert not cycles, "\n".join(describe(c, edges) for c in cycles)


def test_the_check_names_a_cycle(tmp_path: Path) -> None:
    """The check sees a function-local import and names the cycle with its lines."""
    pkg = tmp_path / "slime_core"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "high" / "__init__.py").write_text("")
    (pkg / "high" / "a.py").write_text("from slime_core.low.b import f\n")
    (pkg / "low" / "b.py").write_text("def f():\n    from slime_core.high import a\n")
    edges = import_edges(pkg)
    cycles = find_cycles(edges)
    assert cycles == [["high", "low", "high", "|", "high", "low"]]
    text = describe(cycles[0], edges)
    assert "high -> low  (slime_core/high/a.py:1)" in text
    assert "low -> high  (slime_core/low/b.py:2)" in text


def test_trainkit_stands_below_the_backends() -> None:
    """The backend author's kit (re-exported by ``slime_core.api``) imports no executor and
    nothing of the rollout or driver side (the backends themselves live in plugins): a backend
    that uses it gets only it."""
    above = {"executors", "rollout", "runner", "weights", "builtin", "cli", "api"}
    edges = import_edges()
    wrong = {f"trainkit -> {b} ({where})" for (a, b), where in edges.items()
             if a == "trainkit" and b in above}
    assert not wrong, "slime_core.trainkit imports above itself: " + ", ".join(sorted(wrong))
