"""Shared pieces of the ray executor tests: one Ray instance per test module, a run helper.

Ray start-up costs seconds (tens on a loaded 2-core machine), so each ``tests/test_ray_*.py``
module starts one local instance (127.0.0.1, no dashboard, token authentication on: the
executor's own :func:`start_local_ray`) and shuts it down at the end; the executor reuses an
instance it did not start and leaves it running.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RAY_PLUGINS = "tests.ray_plugins"


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    from slime_core.executors.ray_cluster import start_local_ray

    # 2 trainer ranks + 1 engine + the rollout manager need 4 logical CPUs; torch threads
    # are capped per run (run.num_threads), so oversubscribing the 2 real cores is harmless
    start_local_ray(num_cpus=6)
    yield
    ray.shutdown()


def ray_config(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """``base_config`` switched to the ray executor, with the test plugins in every worker."""
    cfg = copy.deepcopy(base)
    cfg["run"].update(executor="ray", plugin_modules=[RAY_PLUGINS], num_threads=1)
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


def run(data: dict[str, Any], plugins: list[Any] = (), resume: str | None = None,
        selected: tuple[str, ...] = ("slime_grpo",)) -> Path:
    """Like the ``run_slime`` fixture; ``plugins`` are driver-side observers, ``selected``
    the external plugins of the run."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    manager, config = resolve(PluginSelection(plugins=list(selected)), None, (), data)
    for i, p in enumerate(plugins):
        manager.register_object(p, f"test_plugin_{i}")
    return run_training(manager, config, resume_dir=resume)
