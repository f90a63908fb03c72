"""The run directory: resolved config, plugin set, metrics, checkpoints.

Layout::

    RUN_DIR/config.toml        the resolved config (every key, defaults included)
    RUN_DIR/plugins.json       active plugins with distributions and versions
    RUN_DIR/metrics.jsonl      one JSON object per step (train, rollout, eval, perf)
    RUN_DIR/tensorboard/       TensorBoard event files
    RUN_DIR/checkpoints/step_000010/   complete checkpoints (atomic rename)
    RUN_DIR/checkpoints/latest          name of the newest complete checkpoint
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from slime_core.config import Config


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


def atomic_write(path: str | Path, text: str) -> None:
    """Write via a temporary file and ``os.replace`` so readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
            "continue it, or choose another run.run_dir"
        )
    path.mkdir(parents=True, exist_ok=True)
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


def check_resume(run_dir: Path, config: Config, plugins: list[dict[str, Any]]) -> None:
    """Resume only with the same plugin set and config (``run.num_rollouts`` may grow)."""
    saved_plugins = json.loads((run_dir / "plugins.json").read_text())
    key = lambda p: (p["name"], p["distribution"], p["version"])  # noqa: E731
    before = {key(p) for p in saved_plugins}
    now = {key(p) for p in plugins}
    if before != now:
        raise ValueError(
            f"cannot resume {run_dir}: plugin set changed; only before: {sorted(before - now)}, "
            f"only now: {sorted(now - before)}"
        )
    from slime_core.config.loader import read_toml

    saved = read_toml(run_dir / "config.toml")
    current = config.to_dict()
    for section, values in saved.items():
        for k, v in values.items():
            if (section, k) in (("run", "num_rollouts"), ("run", "run_dir")):
                continue
            if current.get(section, {}).get(k) != v:
                raise ValueError(
                    f"cannot resume {run_dir}: config {section}.{k} was {v!r}, now "
                    f"{current.get(section, {}).get(k)!r}"
                )
