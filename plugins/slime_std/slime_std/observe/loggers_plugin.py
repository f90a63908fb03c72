"""Default plugin ``core_loggers``: the ``jsonl``, ``tensorboard`` and ``wandb`` metric loggers
(:mod:`slime_std.observe.loggers`)."""

from __future__ import annotations

from slime_core.api import probe
from slime_hookspecs import LoggerRecord, hookimpl

from slime_std.observe.loggers import JsonlLogger, TensorBoardLogger, WandbLogger


@hookimpl
def slime_register_loggers() -> list[LoggerRecord]:
    return [
        LoggerRecord(name="jsonl", factory=JsonlLogger, summary="metrics.jsonl in the run dir"),
        LoggerRecord(name="tensorboard", factory=TensorBoardLogger,
                     summary="TensorBoard event files", probe=probe("tensorboard")),
        LoggerRecord(name="wandb", factory=WandbLogger,
                     summary="Weights & Biases (offline mode works without network)",
                     probe=probe("wandb")),
    ]
