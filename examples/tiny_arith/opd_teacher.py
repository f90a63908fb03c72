"""Make a teacher model directory for on-policy distillation from a run's checkpoint.

    python examples/tiny_arith/opd_teacher.py RUN_DIR [OUT_DIR]

A checkpoint's ``trainer/model.safetensors`` holds the weights only; the architecture and the
tokenizer are those of ``examples/tiny_arith/model``. OUT_DIR (default
``RUN_DIR/opd_teacher``) gets config, tokenizer and the weights of the newest complete
checkpoint, so ``opd.teacher_path`` (and transformers) can load it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

MODEL = Path(__file__).resolve().parent / "model"


def main(run_dir: str, out_dir: str | None = None) -> Path:
    checkpoints = sorted(p for p in (Path(run_dir) / "checkpoints").glob("step_*")
                         if (p / "COMPLETE").exists())
    if not checkpoints:
        raise SystemExit(f"{run_dir} has no complete checkpoint")
    out = Path(out_dir) if out_dir else Path(run_dir) / "opd_teacher"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(MODEL / name, out / name)
    shutil.copy(checkpoints[-1] / "trainer" / "model.safetensors", out / "model.safetensors")
    print(f"teacher from {checkpoints[-1]} in {out}")
    return out


if __name__ == "__main__":
    main(*sys.argv[1:3])
