"""Executors place a run's components: ``local`` (in-process) or ``ray`` (actors).

The driver loop (:mod:`slime_core.runner.driver`) is the same under both; see
:mod:`slime_core.executors.base` for what an executor provides. The ray modules import
``ray`` at import time, so they are loaded only when ``run.executor = "ray"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slime_core.executors.base import Executor, RolloutFuture

__all__ = ["Executor", "RolloutFuture", "make_executor"]


def make_executor(manager: Any, config: Any, run_dir: Path, accel_record: Any) -> Executor:
    """Build the components of a run where ``run.executor`` says."""
    kind = config.run.executor
    if kind == "local":
        from slime_core.executors.local import LocalExecutor

        return LocalExecutor(manager, config, run_dir, accel_record)
    if kind == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise RuntimeError(
                "run.executor = 'ray' needs Ray: pip install 'ray[default]'"
            ) from exc
        from slime_core.executors.ray_executor import RayExecutor

        return RayExecutor(manager, config, run_dir, accel_record)
    raise ValueError(f"run.executor must be 'local' or 'ray', got {kind!r}")
