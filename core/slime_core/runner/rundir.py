"""The run directory: resolved config, plugin set, metrics, checkpoints.

Layout::

    RUN_DIR/config.toml        the resolved config (every key, defaults included)
    RUN_DIR/plugins.json       active plugins with distributions and versions
    RUN_DIR/metrics.jsonl      one JSON object per step (train, rollout, eval, perf)
    RUN_DIR/tensorboard/       TensorBoard event files
    RUN_DIR/checkpoints/step_000010/   complete checkpoints (atomic rename)
    RUN_DIR/checkpoints/latest          name of the newest complete checkpoint (a hint)

What each file guarantees after a crash at any instant: ``docs/run_directory.md``.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from slime_core.config import Config
from slime_core.runtime.durable import atomic_write, fsync_dir


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if v is None:
        raise ValueError("None cannot be written to TOML")
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def config_to_toml(config: Config) -> str:
    lines = []
    for section, values in config.to_dict().items():
        lines.append(f"[{section}]")
        for k, v in values.items():
            if v is None:
                continue
            lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
    return "\n".join(lines)


def make_run_dir(config: Config) -> Path:
    if config.run.run_dir:
        path = Path(config.run.run_dir)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(config.run.output_dir) / f"{config.run.name}-{stamp}"
    # a start that failed before anything ran (bad model path, ...) leaves only these two
    # files; a retry may reuse the directory, anything else there is kept and refused
    entries = {p.name for p in path.iterdir()} if path.is_dir() else set()
    if entries - {"config.toml", "plugins.json"}:
        raise FileExistsError(
            f"run directory {path} already exists and is not empty; use --resume {path} to "
            "continue it (from its newest checkpoint, or from step 0 when it has none), or "
            "choose another run.run_dir"
        )
    path.mkdir(parents=True, exist_ok=True)
    fsync_dir(path.parent)
    return path


def write_run_files(run_dir: Path, config: Config, plugins: list[dict[str, Any]]) -> None:
    atomic_write(run_dir / "config.toml", config_to_toml(config))
    atomic_write(run_dir / "plugins.json", json.dumps(plugins, indent=2) + "\n")


def resolved_config_path(run_dir: str | Path) -> str:
    p = Path(run_dir) / "config.toml"
    if not p.is_file():
        raise FileNotFoundError(f"{run_dir} is not a slime run directory (no config.toml)")
    return str(p)


def plugin_set(manager: Any) -> list[dict[str, Any]]:
    return [
        {"name": i.name, "distribution": i.distribution, "version": i.version, "source": i.source}
        for i in manager.infos.values() if i.status in ("active", "unavailable")
    ]


def recorded_plugins(run_dir: str | Path) -> list[dict[str, Any]]:
    """The plugin set a run recorded in ``plugins.json``."""
    path = Path(run_dir) / "plugins.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{run_dir} is not a slime run directory (no plugins.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from exc
    if not isinstance(data, list) or not all(isinstance(p, dict) and "name" in p for p in data):
        raise ValueError(f"{path}: not a list of plugins")
    return data


def _describe(p: dict[str, Any]) -> str:
    return f"{p['name']} ({p.get('distribution') or p.get('source')} {p.get('version') or '?'})"


def resume_selection(run_dir: str | Path, selection: Any) -> tuple[Any, str]:
    """The plugin selection a resume of ``run_dir`` loads, and the line that says so.

    Without an explicit ``--plugins`` / ``SLIME_PLUGINS`` the run's recorded set is reused:
    exactly its entry-point plugins, and its built-ins minus those it ran without (autoload
    would otherwise add every plugin installed since, and the resume would refuse the
    changed set). A recorded entry-point plugin that is no longer installed fails here,
    naming it. ``run.plugin_modules`` comes back with the resolved config."""
    from dataclasses import replace

    from slime_core.pluginmgr.builtins import default_plugin_names

    if selection.plugins is not None:
        return selection, (f"resume: using the plugins selected on the command line "
                           f"({', '.join(selection.plugins) or 'none'}), not the recorded set")
    recorded = recorded_plugins(run_dir)
    eps = [p for p in recorded if p.get("source") == "entry point"]
    installed = {ep.name for ep in entry_points(group="slime")}
    missing = [p for p in eps if p["name"] not in installed]
    if missing:
        raise ValueError(
            f"cannot resume {run_dir}: recorded plugin{'s' if len(missing) > 1 else ''} "
            f"{', '.join(_describe(p) for p in missing)} "
            f"{'are' if len(missing) > 1 else 'is'} not installed; install "
            f"{'them' if len(missing) > 1 else 'it'}, or choose the plugin set with --plugins"
        )
    names = {p["name"] for p in recorded}
    off = [n for n in default_plugin_names() if n not in names]
    chosen = replace(selection, plugins=[p["name"] for p in eps],
                     disabled=sorted(set(selection.disabled) | set(off)))
    line = (f"resume: reusing the plugin set recorded in {Path(run_dir) / 'plugins.json'}: "
            f"{', '.join(_describe(p) for p in eps) or 'built-ins only'}")
    if off:
        line += f" (built-ins it ran without: {', '.join(off)})"
    return chosen, line


# Keys a resume may change: how long, where and how fast the run goes, how it is shown and
# kept, never what a step computes (a change is printed; the rest must equal the record).
RESUME_MAY_CHANGE = {
    ("run", "num_rollouts"),  # extend a finished run
    ("run", "run_dir"),
    ("run", "progress"),
    ("run", "num_threads"),
    ("run", "cudnn_attention"),  # attention kernels: same function, other rounding
    ("run", "save_interval"),
    ("run", "save_at_end"),
    ("run", "keep_checkpoints"),
    ("run", "ray_address"),
    ("run", "compile_cache_dir"),
    ("run", "retain_host_memory"),  # where freed host memory goes, not what is computed
    ("rollout", "reward_processes"),  # the same reward functions, in other processes
    # the fast path (auto-resolved per accelerator by slime-std, fast_path.py): the same
    # computation by other kernels, graphs or compiled code; other rounding at most
    ("rollout", "cuda_graphs"),
    ("rollout", "compile_decode"),
    ("rollout", "decode_attention"),
    ("train", "compile"),
    ("train", "cuda_graphs"),  # the one-pass forward replayed from graphs: other rounding
    ("train", "head_kernel"),
}
RESUME_MAY_CHANGE_SECTIONS = {"profile"}


def check_resume(run_dir: Path, config: Config, plugins: list[dict[str, Any]]) -> None:
    """Resume only with every recorded plugin loaded and the same config, up to
    :data:`RESUME_MAY_CHANGE` (printed when changed). A plugin loaded now but not recorded,
    or at another version, is a warning."""
    saved_plugins = recorded_plugins(run_dir)
    now = {p["name"]: p for p in plugins}
    missing = [p for p in saved_plugins if p["name"] not in now]
    if missing:
        raise ValueError(
            f"cannot resume {run_dir}: recorded plugin{'s' if len(missing) > 1 else ''} "
            f"{', '.join(_describe(p) for p in missing)} not loaded now"
        )
    saved = {p["name"]: p for p in saved_plugins}
    for name, p in now.items():
        if name not in saved:
            print(f"warning: resume: plugin {_describe(p)} was not part of the run's recorded "
                  "set; it is loaded now", file=sys.stderr)
        elif (p.get("distribution"), p.get("version")) != (
                saved[name].get("distribution"), saved[name].get("version")):
            print(f"warning: resume: plugin {name} was {_describe(saved[name])}, now "
                  f"{_describe(p)}", file=sys.stderr)
    from slime_core.config.loader import read_toml

    saved_config = read_toml(run_dir / "config.toml")
    current = config.to_dict()
    changed = []
    for section, values in saved_config.items():
        for k, v in values.items():
            now_v = current.get(section, {}).get(k)
            if (section, k) in RESUME_MAY_CHANGE or section in RESUME_MAY_CHANGE_SECTIONS:
                if now_v != v:
                    changed.append(f"{section}.{k} {v!r} -> {now_v!r}")
                continue
            if now_v != v:
                raise ValueError(
                    f"cannot resume {run_dir}: config {section}.{k} was {v!r}, now {now_v!r}"
                    " (only these may change on resume: "
                    f"{', '.join(sorted(f'{a}.{b}' for a, b in RESUME_MAY_CHANGE))}, "
                    f"{', '.join(f'{x}.*' for x in sorted(RESUME_MAY_CHANGE_SECTIONS))})"
                )
    if changed:
        print(f"resume: changed since the run started: {'; '.join(changed)}", file=sys.stderr)
