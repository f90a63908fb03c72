"""The standard metric loggers: ``jsonl``, ``tensorboard``, ``wandb`` (registered by ``core_loggers``,
:mod:`slime_std.observe.loggers_plugin`)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from slime_core.api import atomic_write


class JsonlLogger:
    """Appends one JSON object per step to ``run_dir/metrics.jsonl``, each line flushed and
    fsynced before the step's checkpoint starts (so a checkpoint never outlives its row)."""

    def __init__(self, config: Any, run_dir: str, filename: str = "metrics.jsonl") -> None:
        self.path = os.path.join(run_dir, filename)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def log(self, metrics: dict[str, float], step: int) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in metrics.items()}
        self._fh.write(json.dumps({"step": step, **clean}, sort_keys=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def rewind(self, step: int) -> None:
        """A resume restored the state after ``step``: keep one row (the last) per step up to
        it, move later rows to ``metrics.superseded.jsonl`` and drop a line cut by a kill."""
        self._fh.close()
        kept, superseded = rewind_rows(self.path, step)
        if superseded:
            stem, ext = os.path.splitext(self.path)
            with open(f"{stem}.superseded{ext}", "a", encoding="utf-8") as fh:
                fh.writelines(superseded)
                fh.flush()
                os.fsync(fh.fileno())
        atomic_write(self.path, "".join(kept))
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def close(self) -> None:
        self._fh.close()


def rewind_rows(path: str, step: int) -> tuple[list[str], list[str]]:
    """Lines of ``path`` to keep (one per step id <= ``step``, the last one logged, in step
    order) and the rows past ``step``; lines that are not a JSON row are dropped."""
    by_step: dict[int, str] = {}
    later: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return [], []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed writer
            continue
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            continue
        text = line if line.endswith("\n") else line + "\n"
        if row["step"] <= step:
            by_step[row["step"]] = text
        else:
            later.append(text)
    return [by_step[k] for k in sorted(by_step)], later


class TensorBoardLogger:
    """TensorBoard event files under ``run_dir/tensorboard`` (via torch's SummaryWriter).

    After :meth:`rewind` the next event file starts with a ``purge_step`` marker, which makes
    TensorBoard discard the earlier files' events of the steps run again."""

    def __init__(self, config: Any, run_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter  # a missing package fails at start

        self._make = SummaryWriter
        self._dir = os.path.join(run_dir, "tensorboard")
        self._purge_step: int | None = None
        self._writer: Any = None  # opened at the first row, once a rewind is known

    def _open(self) -> Any:
        if self._writer is None:
            self._writer = self._make(log_dir=self._dir, purge_step=self._purge_step)
        return self._writer

    def log(self, metrics: dict[str, float], step: int) -> None:
        writer = self._open()
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                writer.add_scalar(key, value, step)
        writer.flush()

    def rewind(self, step: int) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._purge_step = step + 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


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
