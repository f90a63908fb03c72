"""Conformance, as datasette does: every hookspec documented, in docs/hooks.md, and tested."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pluggy
import pytest
from slime_hookspecs import PROJECT_NAME
from slime_hookspecs.specs import SPEC_MODULES, hook_names

REPO = Path(__file__).resolve().parents[1]


def _tool(name: str) -> ModuleType:
    """A generator of ``tools/`` (repository scripts, not an installed package)."""
    if str(REPO / "tools") not in sys.path:
        sys.path.insert(0, str(REPO / "tools"))
    return importlib.import_module(name)


def _specs() -> dict[str, object]:
    pm = pluggy.PluginManager(PROJECT_NAME)
    for mod in SPEC_MODULES:
        pm.add_hookspecs(mod)
    return {n: getattr(pm.hook, n).spec for n in hook_names()}


def test_docs_hooks_md_is_current() -> None:
    text = (REPO / "docs" / "hooks.md").read_text()
    assert text == _tool("hookdocs").render(), (
        "docs/hooks.md drifted: run `python tools/hookdocs.py > docs/hooks.md`")


def test_docs_config_md_is_current() -> None:
    text = (REPO / "docs" / "config.md").read_text()
    assert text == _tool("configdocs").render(), (
        "docs/config.md drifted: run `python tools/configdocs.py > docs/config.md`")


def test_config_docs_read_the_comment_after_each_field() -> None:
    from dataclasses import dataclass

    field_comments = _tool("configdocs").field_comments

    @dataclass
    class Section:
        plain: int = 1
        documented: str = "x"  # what it means
        also: bool = False  # one | two
        # explained above,
        # on two lines
        above: int = 2
        wrapped: int = (
            3  # on a continuation line
        )

    assert field_comments(Section) == {
        "documented": "what it means", "also": "one | two",
        "above": "explained above, on two lines", "wrapped": "on a continuation line"}


@pytest.mark.parametrize("name", hook_names())
def test_hookspec_has_a_contract(name: str) -> None:
    spec = _specs()[name]
    doc = inspect.getdoc(spec.function) or ""
    assert "versionadded" in doc, f"{name}: docstring lacks `.. versionadded::`"
    assert "Process" in doc or "process" in doc, f"{name}: docstring does not say in which process it fires"
    if spec.opts.get("firstresult"):
        assert "None" in doc, f"{name}: firstresult hook must say what returning None means"
    assert f"### `{name}`" in (REPO / "docs" / "hooks.md").read_text()


def _test_sources() -> str:
    texts = []
    for path in REPO.rglob("test_*.py"):
        if path.name == "test_conformance.py" or ".venv" in path.parts:
            continue
        texts.append(path.read_text(errors="replace"))
    for path in REPO.rglob("conftest.py"):
        texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


@pytest.mark.parametrize("name", hook_names())
def test_hook_has_a_test(name: str) -> None:
    assert re.search(rf"\b{name}\b", _test_sources()), (
        f"no test mentions {name}: add one that implements or calls it"
    )


def test_hookspecs_type_config_with_the_protocol() -> None:
    """No hookspec takes an untyped ``config``: editors follow it to ``slime_hookspecs.Config``."""
    untyped = []
    for name, spec in _specs().items():
        param = inspect.signature(spec.function).parameters.get("config")
        if param is not None and param.annotation != "Config":
            untyped.append(f"{name}(config: {param.annotation})")
    assert not untyped, untyped


def test_typed_config_is_current() -> None:
    """slime_hookspecs.Config and its section protocols repeat the built-in section
    dataclasses (the hookspecs cannot import the core): generated, so they cannot drift."""
    text = (REPO / "hookspecs" / "slime_hookspecs" / "config.py").read_text()
    assert text == _tool("typed_config").render(), (
        "hookspecs/slime_hookspecs/config.py drifted from the config sections: run "
        "`python tools/typed_config.py --write`")


def test_deprecated_hooks_say_so_and_name_the_replacement() -> None:
    """One way per extension point (docs/plugin_api.md): the hooks the core warns about are
    exactly those whose docstring says ``.. deprecated::``, and each names its record."""
    from slime_core.pluginmgr.deprecation import DEPRECATED_HOOKS

    said = {name for name, spec in _specs().items()
            if ".. deprecated::" in (inspect.getdoc(spec.function) or "")}
    assert said == set(DEPRECATED_HOOKS)
    for name in said:
        doc = inspect.getdoc(_specs()[name].function) or ""
        record = re.search(r"records\.(\w+Record)", doc.split(".. deprecated::")[1])
        assert record and record.group(1) in DEPRECATED_HOOKS[name], name
    plugin_api = (REPO / "docs" / "plugin_api.md").read_text()
    section = plugin_api.split("## One way per extension point", 1)[1]
    for name in said:
        assert f"`{name}`" in section, f"{name}: not in docs/plugin_api.md's table"


def test_first_party_plugins_and_examples_implement_no_deprecated_hook() -> None:
    """The repository's own plugins, examples and benchmarks use the records; only tests
    implement a deprecated hook, on purpose (asserting the warning). Wrappers too: the hooks
    go in 0.2, and slime-std's trace cuts its ``advantages`` phase where the core calls the
    estimator record (``trace_sub_phase``), not around the deprecated alias."""
    from slime_core.pluginmgr.deprecation import DEPRECATED_HOOKS

    names = "|".join(DEPRECATED_HOOKS)
    pattern = re.compile(rf"def ({names})\(|specname=[\"']({names})[\"']")
    roots = [*(REPO / "plugins").glob("*/*/"), REPO / "examples", REPO / "bench"]
    found = []
    for root in roots:
        for path in root.rglob("*.py"):
            if "tests" in path.relative_to(REPO).parts or path.name.startswith("test_"):
                continue
            for m in pattern.finditer(path.read_text(errors="replace")):
                found.append(f"{path.relative_to(REPO)}: {m.group(1) or m.group(2)}")
    assert not found, found
