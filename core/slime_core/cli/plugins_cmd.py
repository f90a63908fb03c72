"""``core plugins``: list, ``info``, ``check`` and ``new``."""

from __future__ import annotations

import json
from typing import Any

import click

from slime_core.cli.options import load_manager, selection_options
from slime_core.pluginmgr import PluginInfo, PluginSelection, SlimePluginManager
from slime_core.pluginmgr.registry import KINDS


def plugin_hooks(manager: SlimePluginManager, name: str) -> list[str]:
    plugin = manager.pluggy.get_plugin(name)
    if plugin is None:
        return []
    return sorted(c.name for c in manager.pluggy.get_hookcallers(plugin) or [])


def plugin_status(manager: SlimePluginManager, info: PluginInfo) -> tuple[str, str | None]:
    """``unavailable`` when every record the plugin registers is unavailable here."""
    if info.status != "active":
        return info.status, info.reason
    try:
        records = [r for recs in manager.registries.by_owner(info.name).values() for r in recs]
    except Exception as exc:  # noqa: BLE001 - reported by `core plugins check`
        return "failed", f"{type(exc).__name__}: {exc}"
    reasons = [r.unavailable_reason() for r in records]
    if records and all(reasons):
        return "unavailable", reasons[0]
    return "active", None


def plugin_libraries(manager: SlimePluginManager, info: PluginInfo) -> dict[str, str | None]:
    """The third-party distributions the plugin's records name (``Record.library``) and their
    installed versions (``None``: not installed); read from package metadata, nothing imported."""
    from importlib.metadata import PackageNotFoundError, version

    if info.status != "active":
        return {}
    try:
        records = [r for recs in manager.registries.by_owner(info.name).values() for r in recs]
    except Exception:  # noqa: BLE001 - plugin_status reports it
        return {}
    out: dict[str, str | None] = {}
    for lib in sorted({r.library for r in records if r.library}):
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            out[lib] = None
    return out


def describe_plugins(manager: SlimePluginManager, include_builtin: bool) -> list[dict[str, Any]]:
    out = []
    for info in manager.infos.values():
        if info.source in ("builtin", "default") and not include_builtin:
            continue
        status, reason = plugin_status(manager, info)
        d = info.to_dict()
        d.update(status=status, reason=reason, hooks=plugin_hooks(manager, info.name),
                 libraries=plugin_libraries(manager, info))
        out.append(d)
    return out


@click.group("plugins", invoke_without_command=True)
@click.option("--all", "include_all", is_flag=True, help="Include the built-in and default plugins.")
@click.option("--hook", "hook", default=None, metavar="NAME", help="Only plugins implementing NAME.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--requirements", is_flag=True, help="Show each plugin's declared requirements.")
@selection_options
@click.pass_context
def plugins_group(ctx: click.Context, include_all: bool, hook: str | None, as_json: bool,
                  requirements: bool, selection: PluginSelection) -> None:
    """List plugins: name, distribution, version, source, status, library versions, hooks."""
    if ctx.invoked_subcommand is not None:
        return
    manager = load_manager(selection)
    rows = describe_plugins(manager, include_builtin=include_all)
    if hook:
        rows = [r for r in rows if hook in r["hooks"]]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no plugins installed (use --all to include the core's built-ins)")
        return
    for r in rows:
        status = f"{r['status']}: {r['reason']}" if r["reason"] else r["status"]
        dist = f"{r['distribution'] or '-'} {r['version'] or ''}".strip()
        libs = ", ".join(f"{lib} {ver}" for lib, ver in r["libraries"].items() if ver)
        on = f"  [on {libs}]" if libs else ""
        click.echo(f"{r['name']}  ({dist}, {r['source']})  {status}{on}")
        if r["hooks"]:
            click.echo(f"    hooks: {', '.join(r['hooks'])}")
        if requirements:
            reqs = r["requirements"] or ["(none declared)"]
            click.echo(f"    requires: {', '.join(reqs)}")


@plugins_group.command("info")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@selection_options
def info_command(name: str, as_json: bool, selection: PluginSelection) -> None:
    """Details of one plugin and every record it registers, by kind."""
    manager = load_manager(selection)
    if name not in manager.infos:
        import difflib

        close = difflib.get_close_matches(name, list(manager.infos), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise click.UsageError(
            f"unknown plugin {name!r}{hint}; plugins: {', '.join(sorted(manager.infos))}"
        )
    info = manager.infos[name]
    status, reason = plugin_status(manager, info)
    records = {}
    if info.status == "active":
        for kind, recs in manager.registries.by_owner(name).items():
            records[kind] = [
                {"name": r.name, "summary": r.summary, "unavailable": r.unavailable_reason()}
                for r in recs
            ]
    from slime_core.config.schema import build_schema

    schema = build_schema(manager)
    sections = [
        {"name": s, "summary": schema.get(s).summary}
        for s in schema.sections()
        if schema.get(s).owner == name
    ]
    data = {**info.to_dict(), "status": status, "reason": reason,
            "hooks": plugin_hooks(manager, name), "records": records, "config_sections": sections,
            "libraries": plugin_libraries(manager, info)}
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{name}: {data['distribution'] or '-'} {data['version'] or ''} ({info.source})")
    click.echo(f"  module: {info.module}")
    click.echo(f"  status: {status}{': ' + reason if reason else ''}")
    if info.traceback:
        click.echo("  traceback:\n" + "\n".join("    " + ln for ln in info.traceback.splitlines()))
    click.echo(f"  hooks: {', '.join(data['hooks']) or '-'}")
    for lib, ver in data["libraries"].items():
        click.echo(f"  runs on: {lib} {ver or '(not installed)'}")
    for sec in sections:
        click.echo(f"  config section [{sec['name']}]: {sec['summary']}")
    for kind, recs in records.items():
        label = KINDS[kind][1]
        click.echo(f"  {label + ('es' if label.endswith(('s', 'x')) else 's')}:")
        for r in recs:
            avail = f"  (unavailable: {r['unavailable']})" if r["unavailable"] else ""
            click.echo(f"    {r['name']}: {r['summary']}{avail}")


def find_problems(manager: SlimePluginManager) -> tuple[list[str], list[str]]:
    """(problems, notes): problems fail ``core plugins check``; unavailable records are notes."""
    problems: list[str] = []
    notes: list[str] = []
    try:
        manager.check_pending()
    except Exception as exc:  # noqa: BLE001
        problems.append(f"hook validation: {exc}")
    for info in manager.infos.values():
        if info.status == "failed":
            problems.append(
                f'plugin "{info.name}" from {info.distribution} {info.version} failed to load: '
                f"{info.reason}"
            )
        if info.status == "active" and info.distribution:
            problems.extend(_unmet_requirements(info))
    for kind in KINDS:
        try:
            reg = manager.registries.get(kind)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{KINDS[kind][1]} registry: {exc}")
            continue
        for rec in reg:
            why = rec.unavailable_reason()
            if why:
                notes.append(f"{KINDS[kind][1]} {rec.name!r} ({rec.owner}) unavailable: {why}")
    from slime_core.config.schema import build_schema

    try:
        build_schema(manager)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"config sections: {exc}")
    return problems, notes


def _unmet_requirements(info: PluginInfo) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - packaging ships with pip
        return []
    out = []
    for text in info.requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = version(req.name)
        except PackageNotFoundError:
            out.append(f'plugin "{info.name}" requires {text}, which is not installed')
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(f'plugin "{info.name}" requires {text}, but {req.name} {have} is installed')
    return out


def unavailable_plugins(manager: SlimePluginManager) -> list[tuple[str, str]]:
    """``(name, reason)`` of loaded plugins none of whose records can be used on this host."""
    out = []
    for info in manager.infos.values():
        status, reason = plugin_status(manager, info)
        if status == "unavailable":
            out.append((info.name, reason or "unavailable"))
    return out


@plugins_group.command("check")
@selection_options
def check_command(selection: PluginSelection) -> None:
    """Validate plugins: hooks, load errors, requirements, registries, availability.

    \b
    Exit status 1 on problems: a plugin that fails to load (import or registration error),
    hook validation, an unmet requirement, a registry or config-section conflict.
    Plugins and records unavailable on this host (no GPU or NPU here, an optional backend
    not installed) are reported as info and notes: they are expected, not errors.
    """
    manager = load_manager(selection)
    problems, notes = find_problems(manager)
    unavailable = unavailable_plugins(manager)
    for name, reason in unavailable:
        click.echo(f"info: plugin {name!r} is unavailable on this host: {reason}")
    for note in notes:
        click.echo(f"note: {note}")
    for note in _sandbox_notes(manager):
        click.echo(f"note: {note}")
    failed = [i.name for i in manager.infos.values() if i.status == "failed"]
    n = len([i for i in manager.infos.values() if i.status == "active"]) - len(unavailable)
    counts = f"{n} plugins active, {len(unavailable)} unavailable here"
    if problems:
        for p in problems:
            click.echo(f"problem: {p}", err=True)
        click.echo(f"{len(problems)} problem(s): {counts}"
                   + (f", {len(failed)} failed to load ({', '.join(failed)})" if failed else ""),
                   err=True)
        raise click.exceptions.Exit(1)
    click.echo(f"ok: {counts} (info above), no problems")


def _sandbox_notes(manager: SlimePluginManager) -> list[str]:
    """How each usable sandbox enforces its limits here: what its record's
    ``extra["limits_report"]()`` says (``{limit: how}``), for those that have one."""
    notes: list[str] = []
    for rec in manager.registries.sandbox:
        report = rec.extra.get("limits_report")
        if report is None or rec.unavailable_reason() is not None:
            continue
        notes += [f"sandbox {rec.name!r} {k}: {v}" for k, v in report().items()]
    return notes


@plugins_group.command("new")
@click.argument("name")
@click.option("--dir", "directory", default=".", show_default=True, help="Where to create it.")
def new_command(name: str, directory: str) -> None:
    """Scaffold a third-party plugin package ``slime-NAME``."""
    from slime_core.cli.scaffold import scaffold_plugin

    try:
        path = scaffold_plugin(name, directory)
    except (ValueError, FileExistsError) as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(f"created {path}")
    click.echo(f"next: pip install -e {path} && pytest {path}")
