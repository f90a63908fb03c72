"""A third-party weight transport for the ray executor tests, loaded in every Ray worker via
``run.plugin_modules`` (the core knows no transport by name: the engine actor finds this
record in its own registry and runs its engine side there).

``via_files``: trainer rank 0 saves each version with ``torch.save`` under
``RUN_DIR/via_files/``; the engine side, built in each engine's process, loads it into the
engine. Both sides leave marker files there (``trainer-<pid>-v<version>``,
``built-<pid>-<n>``, ``engine-<pid>-v<version>``), so a test sees which process ran what.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from slime_core.api import call_engine_side
from slime_hookspecs import WeightTransportRecord, hookimpl

NAME = "via_files"
_BUILT = 0


def _dir(config: Any) -> Path:
    d = Path(config.run.run_dir) / NAME
    d.mkdir(parents=True, exist_ok=True)
    return d


class FilesTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        import torch

        t0 = time.perf_counter()
        path = _dir(self.config) / f"v{version}.pt"
        torch.save({k: v.detach().cpu() for k, v in weights.items()}, path)
        (_dir(self.config) / f"trainer-{os.getpid()}-v{version}").touch()
        for e in engines:
            call_engine_side(self.config, e, NAME, "load", str(path), version)
        return {"bytes": float(path.stat().st_size * len(engines)),
                "seconds": time.perf_counter() - t0}


class FilesEngineSide:
    def __init__(self, config: Any, engine: Any) -> None:
        global _BUILT
        _BUILT += 1
        self.config, self.engine = config, engine
        (_dir(config) / f"built-{os.getpid()}-{_BUILT}").touch()

    def load(self, path: str, version: int) -> None:
        import torch

        self.engine.update_weights(torch.load(path), version)
        (_dir(self.config) / f"engine-{os.getpid()}-v{version}").touch()


@hookimpl
def slime_register_weight_transports() -> list[WeightTransportRecord]:
    return [WeightTransportRecord(name=NAME, factory=FilesTransport,
                                  engine_side=FilesEngineSide,
                                  summary="torch.save files, loaded by the engine side")]
