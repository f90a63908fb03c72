"""``core hooks``: every hookspec, its flags, signature, summary and implementations in call order."""

from __future__ import annotations

import inspect
import json
from typing import Any

import click

from slime_core.cli.options import load_manager, selection_options
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_hookspecs.specs import family_of, hook_names


def _summary(fn: Any) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _where(fn: Any) -> str:
    source = getattr(fn, "slime_source", None)  # slime_hookspecs.Records.hook: the plugin's line
    if source is not None:
        return f"{source[0]}:{source[1]}"
    try:
        path = inspect.getsourcefile(fn) or "?"
        return f"{path}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return "?"


def call_order(manager: SlimePluginManager, name: str) -> list[dict[str, Any]]:
    """Implementations of ``name`` in the order pluggy calls them.

    pluggy runs wrappers outermost-first (the last registered / tryfirst wrapper is entered
    first), then plain implementations from the end of ``get_hookimpls()`` to its start.
    """
    caller = getattr(manager.pluggy.hook, name)
    impls = list(caller.get_hookimpls())
    wrappers = [i for i in impls if i.wrapper or i.hookwrapper]
    plain = [i for i in impls if not (i.wrapper or i.hookwrapper)]
    out = []
    for impl in [*reversed(wrappers), *reversed(plain)]:
        flags = [f for f in ("tryfirst", "trylast", "wrapper", "hookwrapper") if getattr(impl, f)]
        out.append({
            "plugin": impl.plugin_name,
            "flags": flags,
            "location": _where(impl.function),
        })
    return out


def describe_hooks(manager: SlimePluginManager) -> list[dict[str, Any]]:
    out = []
    for name in hook_names():
        caller = getattr(manager.pluggy.hook, name)
        spec = caller.spec
        opts = spec.opts
        flags = [f for f in ("firstresult", "historic", "warn_on_impl") if opts.get(f)]
        out.append({
            "name": name,
            "family": family_of(name),
            "flags": flags,
            "signature": f"{name}{inspect.signature(spec.function)}".replace("'", ""),
            "summary": _summary(spec.function),
            "implementations": call_order(manager, name),
        })
    return out


@click.command("hooks")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--unimplemented", is_flag=True, help="Only hooks no active plugin implements.")
@selection_options
def hooks_command(name: str | None, as_json: bool, unimplemented: bool,
                  selection: PluginSelection) -> None:
    """List every hook with its flags, signature and implementations in call order."""
    manager = load_manager(selection)
    hooks = describe_hooks(manager)
    if name:
        hooks = [h for h in hooks if h["name"] == name]
        if not hooks:
            import difflib

            close = difflib.get_close_matches(name, hook_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise click.UsageError(f"unknown hook {name!r}{hint}; see `core hooks`")
    if unimplemented:
        hooks = [h for h in hooks if not h["implementations"]]
    if as_json:
        click.echo(json.dumps(hooks, indent=2))
        return
    family = None
    for h in hooks:
        if h["family"] != family and not name:
            family = h["family"]
            click.secho(f"== {family} hooks ==", bold=True)
        flags = f" [{', '.join(h['flags'])}]" if h["flags"] else ""
        click.echo(f"{h['signature']}{flags}")
        click.echo(f"    {h['summary']}")
        if not h["implementations"]:
            click.echo("    (no implementation)")
        for i, impl in enumerate(h["implementations"], 1):
            iflags = f" ({', '.join(impl['flags'])})" if impl["flags"] else ""
            click.echo(f"    {i}. {impl['plugin']}{iflags}  {impl['location']}")
        if name:
            import inspect as _inspect

            spec = getattr(manager.pluggy.hook, h["name"]).spec
            click.echo("")
            click.echo(_inspect.getdoc(spec.function) or "")
