"""The plugin manager: built-ins first, then the default plugins (entry-point group
``slime.defaults``, slime-std's records), then entry points of group ``slime``, one at a time.

A plugin that fails to import or to register is reported as ``failed`` and the others still
load (as conda does), with one warning on stderr naming it and the error; unless it was
explicitly requested (``--plugins``, ``SLIME_PLUGINS``, ``run.required_plugins``): then loading
stops with ``Error loading plugin "<name>" from <dist> <version>: <reason>``. Disabling a name
that is no plugin (``--disable-plugin nope``) is a usage error listing the valid names.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

import pluggy

from slime_core.pluginmgr.builtins import BUILTIN_PLUGINS, ESSENTIAL
from slime_hookspecs import DEFAULT_ENTRY_POINT_GROUP, ENTRY_POINT_GROUP, PROJECT_NAME
from slime_hookspecs.specs import SPEC_MODULES, hook_names

if sys.version_info >= (3, 10):
    from importlib.metadata import EntryPoint, entry_points
else:  # pragma: no cover
    from importlib_metadata import EntryPoint, entry_points


class PluginUsageError(ValueError):
    """Bad plugin selection from the user (unknown name, disabling an essential plugin)."""


class PluginLoadError(RuntimeError):
    """A requested plugin could not be imported or registered."""


_warned: set[tuple[str, str]] = set()  # (plugin, reason) warned about in this process


def _warn_failed(name: str, dist: str, version: str, reason: str) -> None:
    """Say once per process that an autoloaded plugin was skipped (it used to be silent)."""
    if (name, reason) in _warned:
        return
    _warned.add((name, reason))
    print(f'warning: plugin "{name}" from {dist} {version} failed to load and is skipped: '
          f"{reason} (`core plugins info {name}` shows the traceback)", file=sys.stderr)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@dataclass
class PluginSelection:
    """Which plugins a process loads; picklable so workers rebuild the same set.

    ``plugins`` is the exact set of external (entry-point) plugins, ``None`` meaning every one
    installed (unless ``autoload`` is off). ``modules`` are extra plugin modules by import path
    (``run.plugin_modules``); ``required`` must load or the run stops.
    """

    plugins: list[str] | None = None
    disabled: list[str] = field(default_factory=list)
    autoload: bool = True
    modules: list[str] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    trace: bool = False

    @classmethod
    def from_cli(
        cls,
        plugins: str | None = None,
        disabled: tuple[str, ...] | list[str] = (),
        disable_autoload: bool = False,
        trace: bool = False,
        environ: dict[str, str] | None = None,
    ) -> PluginSelection:
        """Merge command-line options with ``SLIME_PLUGINS``, ``SLIME_DISABLE_PLUGINS``,
        ``SLIME_DISABLE_PLUGIN_AUTOLOAD`` and ``SLIME_TRACE_HOOKS`` (the command line wins)."""
        env = os.environ if environ is None else environ
        chosen = _split(plugins) if plugins is not None else None
        if chosen is None and env.get("SLIME_PLUGINS"):
            chosen = _split(env["SLIME_PLUGINS"])
        off = [d for item in disabled for d in _split(item)]
        off += _split(env.get("SLIME_DISABLE_PLUGINS"))
        no_autoload = disable_autoload or env.get("SLIME_DISABLE_PLUGIN_AUTOLOAD", "") not in (
            "",
            "0",
            "false",
        )
        return cls(
            plugins=chosen,
            disabled=sorted(set(off)),
            autoload=not no_autoload,
            trace=trace or env.get("SLIME_TRACE_HOOKS", "") not in ("", "0", "false"),
        )

    def explicitly_requested(self) -> set[str]:
        return set(self.plugins or []) | set(self.required)


@dataclass
class PluginInfo:
    """What ``core plugins`` shows for one plugin."""

    name: str
    source: str  # "builtin" | "default" | "entry point" | "module"
    module: str
    distribution: str | None = None
    version: str | None = None
    status: str = "active"  # active | blocked | failed | unavailable
    reason: str | None = None
    essential: bool = False
    requirements: list[str] = field(default_factory=list)
    traceback: str | None = None

    @property
    def status_text(self) -> str:
        return f"{self.status}: {self.reason}" if self.reason else self.status

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "source": self.source,
            "module": self.module,
            "status": self.status,
            "reason": self.reason,
            "essential": self.essential,
            "requirements": self.requirements,
        }


class SlimePluginManager:
    """pluggy's manager plus slime's selection rules, load report and registries."""

    # set on first use by slime_core.context.run_context (absent until then: declared only)
    run_context: Any

    def __init__(self, selection: PluginSelection | None = None) -> None:
        self.selection = selection or PluginSelection()
        self.pluggy = pluggy.PluginManager(PROJECT_NAME)
        for mod in SPEC_MODULES:
            self.pluggy.add_hookspecs(mod)
        self.infos: dict[str, PluginInfo] = {}
        self._registries: Any = None
        # lines for the user from slime_configure (slime_core.context.config_notice), printed
        # by the driver once the config has passed its checks
        self.notices: list[str] = []
        if self.selection.trace:
            from slime_core.pluginmgr.hook_tracer import install_tracer

            install_tracer(self.pluggy)

    # -- public --------------------------------------------------------------------------
    @property
    def hook(self) -> Any:
        return self.pluggy.hook

    @property
    def pm(self) -> pluggy.PluginManager:
        """The former name of :attr:`pluggy`, for plugins that reach it through
        ``slime_core.api.get_manager()`` (public since 0.1)."""
        return self.pluggy

    @property
    def registries(self) -> Any:
        """The registries built from the registration hooks (built on first use)."""
        if self._registries is None:
            from slime_core.pluginmgr.registry import Registries

            self._registries = Registries(self.pluggy)
        return self._registries

    def active(self) -> list[PluginInfo]:
        return [i for i in self.infos.values() if i.status in ("active", "unavailable")]

    def plugin_name(self, plugin: object) -> str:
        return self.pluggy.get_name(plugin) or repr(plugin)

    def snapshot(self) -> PluginSelection:
        """The selection that rebuilds exactly this plugin set in another process."""
        loaded_eps = [i.name for i in self.infos.values() if i.source == "entry point"]
        # a plugin that failed here is left out: named in ``plugins`` it would count as
        # explicitly requested in the worker, where the same failure would stop the load
        loaded_eps = [n for n in loaded_eps if self.infos[n].status not in ("blocked", "failed")]
        return replace(self.selection, plugins=loaded_eps, autoload=True)

    def register_object(self, plugin: object, name: str, info: PluginInfo | None = None) -> None:
        """Register an in-memory plugin (tests, programmatic use) after validating it."""
        self._register(plugin, name)
        self.infos[name] = info or PluginInfo(name=name, source="module", module=repr(plugin))
        self._registries = None

    def check_pending(self) -> None:
        """Fail on hook implementations that match no specification."""
        try:
            self.pluggy.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(str(exc)) from exc

    # -- loading -------------------------------------------------------------------------
    def load(self) -> SlimePluginManager:
        sel = self.selection
        bad = sorted(set(sel.disabled) & ESSENTIAL)
        if bad:
            raise PluginUsageError(
                f"plugin {bad[0]!r} is essential to slime-core and cannot be disabled "
                f"(essential built-ins: {', '.join(sorted(ESSENTIAL))})"
            )
        for name, modname, essential in BUILTIN_PLUGINS:
            info = PluginInfo(
                name=name, source="builtin", module=modname, essential=essential,
                distribution="slime-core", version=_dist_version("slime-core"),
            )
            self.infos[name] = info
            if name in sel.disabled:
                info.status, info.reason = "blocked", "disabled by --disable-plugin"
                continue
            module = importlib.import_module(modname)
            self._register(module, name)
        self._load_defaults()
        self._load_entry_points()
        self._check_disabled_names()
        for modname in sel.modules:
            self._load_module(modname)
        missing = [
            n for n in sel.required
            if n not in self.infos or self.infos[n].status not in ("active", "unavailable")
        ]
        if missing:
            name = missing[0]
            found = self.infos.get(name)
            why = found.status_text if found else "not installed"
            raise PluginLoadError(
                f"required plugin {name!r} is not loaded ({why}); installed plugins: "
                f"{', '.join(sorted(self.infos)) or 'none'}"
            )
        return self

    def _load_defaults(self) -> None:
        """Default plugins load whatever ``--plugins`` or autoload say; ``--disable-plugin``
        blocks one. One that fails to load stops the load: it is part of the installation,
        and a run without it would fail later on a missing record instead of on its cause."""
        for ep in sorted(entry_points(group=DEFAULT_ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist, version = _ep_dist(ep)
            if ep.name in self.infos:
                other = self.infos[ep.name]
                raise PluginLoadError(
                    f'Error loading plugin "{ep.name}" from {dist} {version}: plugin name '
                    f"{ep.name!r} is provided by both {other.distribution or other.source} "
                    f"and {dist}")
            info = PluginInfo(name=ep.name, source="default", module=ep.value,
                              distribution=dist, version=version, requirements=_requirements(dist))
            self.infos[ep.name] = info
            if ep.name in self.selection.disabled:
                info.status, info.reason = "blocked", "disabled by --disable-plugin"
                continue
            try:
                self._register(ep.load(), ep.name)
            except PluginLoadError:
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised naming the plugin
                raise PluginLoadError(
                    f'Error loading default plugin "{ep.name}" from {dist} {version}: '
                    f"{_reason(exc)} (turn it off with --disable-plugin {ep.name})") from exc

    def _load_entry_points(self) -> None:
        sel = self.selection
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
        found = {ep.name for ep in eps}
        for wanted in sel.plugins or []:
            if wanted not in found and wanted not in self.infos:
                choices = sorted(found) or ["(no plugin installed)"]
                close = difflib.get_close_matches(wanted, sorted(found), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise PluginUsageError(
                    f"unknown plugin {wanted!r}{hint}; installed plugins: {', '.join(choices)}"
                )
        requested = sel.explicitly_requested()
        requested |= _built_on(eps, requested)
        for ep in sorted(eps, key=lambda e: e.name):
            dist, version = _ep_dist(ep)
            if ep.name in self.infos:
                other = self.infos[ep.name]
                err = (
                    f"plugin name {ep.name!r} is provided by both "
                    f"{other.distribution or other.source} and {dist}"
                )
                if ep.name in requested or other.source in ("builtin", "default"):
                    raise PluginLoadError(f'Error loading plugin "{ep.name}" from {dist} {version}: {err}')
                continue
            info = PluginInfo(
                name=ep.name, source="entry point", module=ep.value,
                distribution=dist, version=version, requirements=_requirements(dist),
            )
            self.infos[ep.name] = info
            if ep.name in sel.disabled:
                info.status, info.reason = "blocked", "disabled by --disable-plugin"
                continue
            if sel.plugins is not None and ep.name not in sel.plugins and ep.name not in requested:
                info.status, info.reason = "blocked", "not selected by --plugins"
                continue
            if sel.plugins is None and not sel.autoload and ep.name not in requested:
                info.status, info.reason = "blocked", "autoload disabled"
                continue
            try:
                plugin = ep.load()
                self._register(plugin, ep.name)
            except Exception as exc:  # noqa: BLE001 - one broken plugin must not stop the rest
                reason = _reason(exc)
                if ep.name in requested:
                    raise PluginLoadError(
                        f'Error loading plugin "{ep.name}" from {dist} {version}: {reason}'
                    ) from exc
                info.status, info.reason = "failed", reason
                info.traceback = "".join(traceback.format_exception(exc))
                _warn_failed(ep.name, dist, version, reason)

    def _check_disabled_names(self) -> None:
        unknown = [d for d in self.selection.disabled if d not in self.infos]
        if unknown:
            name = unknown[0]
            close = difflib.get_close_matches(name, sorted(self.infos), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PluginUsageError(
                f"--disable-plugin / SLIME_DISABLE_PLUGINS: no plugin named {name!r}{hint}; "
                f"plugins: {', '.join(sorted(self.infos))}"
            )

    def _load_module(self, modname: str) -> None:
        if modname in self.infos:
            return
        info = PluginInfo(name=modname, source="module", module=modname)
        self.infos[modname] = info
        try:
            self._register(importlib.import_module(modname), modname)
        except Exception as exc:  # noqa: BLE001
            raise PluginLoadError(
                f'Error loading plugin "{modname}" from module {modname}: {_reason(exc)}'
            ) from exc

    def _register(self, plugin: object, name: str) -> None:
        _validate_impl_names(plugin, name)
        try:
            self.pluggy.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(_signature_message(self.pluggy, plugin, name, exc)) from exc


def build_plugin_manager(selection: PluginSelection | None = None) -> SlimePluginManager:
    """Build and load a plugin manager for ``selection`` (default: env-driven selection)."""
    return SlimePluginManager(selection or PluginSelection.from_cli()).load()


# -- helpers -------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _ep_dist(ep: EntryPoint) -> tuple[str, str]:
    d = getattr(ep, "dist", None)
    if d is None:
        return "<unknown distribution>", "?"
    return d.metadata["Name"], d.version


def _built_on(eps: list[EntryPoint], named: set[str]) -> set[str]:
    """The plugins a named plugin is built on, which come with it: those of its own
    distribution (slime-agent's ``slime_agent`` serves the agent API of its ``core_tools``) and
    of the plugin distributions it depends on, transitively (slime-mcp-tools' tool source runs
    in slime-agent's ``core_tools``). ``--disable-plugin`` still blocks any of them."""
    by_dist: dict[str, list[str]] = {}
    for ep in eps:
        by_dist.setdefault(_norm(_ep_dist(ep)[0]), []).append(ep.name)
    todo = [_norm(_ep_dist(ep)[0]) for ep in eps if ep.name in named]
    dists: set[str] = set()
    while todo:
        dist = todo.pop()
        if dist in dists or dist not in by_dist:
            continue
        dists.add(dist)
        for req in _requirements(dist):
            if "extra ==" not in req.replace('"', "").replace("'", ""):
                todo.append(_norm(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0]))
    return {name for dist in dists for name in by_dist[dist]}


def _norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _requirements(dist: str) -> list[str]:
    from importlib.metadata import PackageNotFoundError, requires

    try:
        return list(requires(dist) or [])
    except PackageNotFoundError:
        return []


def _validate_impl_names(plugin: object, name: str) -> None:
    """A ``slime_*`` hook implementation with no matching spec is a typo: fail naming it."""
    known = set(hook_names())
    for attr in dir(plugin):
        if not attr.startswith("slime_") or attr in known:
            continue
        obj = getattr(plugin, attr, None)
        if obj is None or not callable(obj):
            continue
        if getattr(obj, PROJECT_NAME + "_impl", None) is None:
            continue
        close = difflib.get_close_matches(attr, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise PluginLoadError(
            f'plugin "{name}": {attr} is marked @hookimpl but is not a slime hook{hint} '
            f"({_where(obj)})"
        )


def _where(fn: Any) -> str:
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return "<unknown location>"


def _signature_message(
    pluggy_manager: pluggy.PluginManager, plugin: object, name: str, exc: pluggy.PluginValidationError
) -> str:
    for attr in dir(plugin):
        if not attr.startswith("slime_"):
            continue
        impl = getattr(plugin, attr)
        caller = getattr(pluggy_manager.hook, attr, None)
        spec = getattr(caller, "spec", None) if caller else None
        if spec is None or not callable(impl):
            continue
        impl_args = [
            p for p in inspect.signature(impl).parameters if p not in ("self", "cls")
        ]
        extra = [a for a in impl_args if a not in spec.argnames]
        if extra:
            return (
                f'plugin "{name}": hook {attr}{inspect.signature(impl)} does not match the '
                f"specification {attr}({', '.join(spec.argnames)}): argument(s) "
                f"{', '.join(extra)} not in the spec ({_where(impl)})"
            )
    return f'plugin "{name}": {exc}'

