"""Built-in plugin ``core_loggers``: the ``jsonl``, ``tensorboard`` and ``wandb`` metric loggers
(:mod:`slime_core.observe.loggers`)."""

from __future__ import annotations

from slime_hookspecs import LoggerRecord, hookimpl

from slime_core.observe.loggers import JsonlLogger, TensorBoardLogger, WandbLogger


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
