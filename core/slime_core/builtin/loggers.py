"""Built-in plugin ``core_loggers``: the ``jsonl`` and ``tensorboard`` metric loggers."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from slime_hookspecs import LoggerRecord, hookimpl


class JsonlLogger:
    """Appends one JSON object per step to ``run_dir/metrics.jsonl`` (flushed each line)."""

    def __init__(self, config: Any, run_dir: str, filename: str = "metrics.jsonl") -> None:
        self.path = os.path.join(run_dir, filename)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def log(self, metrics: dict[str, float], step: int) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in metrics.items()}
        self._fh.write(json.dumps({"step": step, **clean}, sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class TensorBoardLogger:
    """TensorBoard event files under ``run_dir/tensorboard`` (via torch's SummaryWriter)."""

    def __init__(self, config: Any, run_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=os.path.join(run_dir, "tensorboard"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _tb_probe() -> str | None:
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        return "tensorboard is not installed (pip install tensorboard)"
    return None


def _wandb_probe() -> str | None:
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        return "wandb is not installed (pip install wandb)"
    return None


class WandbLogger:
    """Weights & Biases; set ``WANDB_MODE=offline`` to run without network."""

    def __init__(self, config: Any, run_dir: str) -> None:
        import wandb

        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "slime"), dir=run_dir,
            name=config.run.name, config=config.to_dict(), reinit=True,
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


@hookimpl
def slime_register_loggers() -> list[LoggerRecord]:
    return [
        LoggerRecord(name="jsonl", factory=JsonlLogger, summary="metrics.jsonl in the run dir"),
        LoggerRecord(name="tensorboard", factory=TensorBoardLogger,
                     summary="TensorBoard event files", probe=_tb_probe),
        LoggerRecord(name="wandb", factory=WandbLogger,
                     summary="Weights & Biases (offline mode works without network)",
                     probe=_wandb_probe),
    ]
