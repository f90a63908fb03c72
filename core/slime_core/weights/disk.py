"""The ``disk`` weight transport: a versioned safetensors directory.

Each version is written as ``<weights.dir>/v<version>/model.safetensors`` (atomically renamed
when complete), ``slime_after_weights_written`` fires on the writer (trainer rank 0), then the
engine side (:func:`receive`) runs in each engine's process: it fires
``slime_before_weights_read`` there and has the engine load the directory (its own
``update_weights_from_disk`` where it has one, e.g. an SGLang server or vLLM reloading the
files itself; else the tensors are read here and given to ``update_weights``). Under the ray
executor that process is the engine actor (multi-node: ``weights.dir`` on a shared
filesystem). Old versions beyond the two newest are removed.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from slime_core.weights.buckets import nbytes


def read_version_dir(version_dir: str, version: int) -> dict[str, Any]:
    """The tensors of a version directory's ``model.safetensors``."""
    from safetensors.torch import load_file

    path = os.path.join(version_dir, "model.safetensors")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weight version {version}: {path} does not exist")
    return load_file(path)


def receive(engine: Any, version_dir: str, version: int) -> None:
    """Engine side, in the engine's process: ``slime_before_weights_read``, then load."""
    from slime_core.context import get_manager

    get_manager().hook.slime_before_weights_read(version_dir=version_dir, target_version=version)
    if hasattr(engine, "update_weights_from_disk"):
        engine.update_weights_from_disk(version_dir, version)
    else:
        engine.update_weights(read_version_dir(version_dir, version), version)


class DiskTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config
        base = config.weights.dir or os.path.join(config.run.run_dir or config.run.output_dir,
                                                  "weights")
        self.root = Path(base)
        self.root.mkdir(parents=True, exist_ok=True)

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        from safetensors.torch import save_file

        from slime_core.context import get_manager
        from slime_core.trainer.torch_trainer import _untie

        t0 = time.perf_counter()
        final = self.root / f"v{version:06d}"
        tmp = self.root / f".v{version:06d}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        cpu = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
        save_file(_untie(cpu), str(tmp / "model.safetensors"))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        get_manager().hook.slime_after_weights_written(
            config=self.config, version_dir=str(final), engines=engines)
        for e in engines:
            if getattr(e, "handle", None) is not None:  # a Ray engine actor: receive() runs there
                e.receive_from_disk(str(final), version)
            else:
                receive(e, str(final), version)
        for old in sorted(self.root.glob("v*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return {"bytes": float(nbytes(cpu) * (1 + len(engines))),
                "seconds": time.perf_counter() - t0}
