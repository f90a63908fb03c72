"""``lora.export_merged``: the base with the final adapters merged in, as a Hugging Face model.

Runs in the driver at the end of a completed run, from the last checkpoint's PEFT files (so it
does not depend on where the trainer ranks live): base from ``[model]``, ``PeftModel.
from_pretrained``, ``merge_and_unload``, ``save_pretrained`` to ``<run_dir>/merged_model``
(with the tokenizer when there is one).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

MERGED_DIR = "merged_model"


def last_adapter_dir(run_dir: str) -> Path:
    """The PEFT adapter directory of the run's latest checkpoint (``checkpoints/latest`` names
    it; the trainer's files are in its ``trainer/``)."""
    latest = Path(run_dir) / "checkpoints" / "latest"
    if not latest.is_file():
        raise FileNotFoundError(f"lora.export_merged: {run_dir} has no checkpoint to export")
    path = latest.parent / latest.read_text().strip() / "trainer"
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"lora.export_merged: {path} holds no PEFT adapter")
    return path


def export_merged(config: Any, run_dir: str) -> Path:
    """Write ``<run_dir>/merged_model``; returns its path."""
    import torch
    from peft import PeftModel
    from slime_core.api import load_causal_lm, load_tokenizer, resolve_dtype

    adapter = last_adapter_dir(run_dir)
    dtype = resolve_dtype(config.model.dtype, torch.device("cpu"))
    base = load_causal_lm(config.model, "cpu", dtype, role="actor", seed=config.run.seed)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    out = Path(run_dir) / MERGED_DIR
    tmp = out.with_name(MERGED_DIR + ".tmp")
    merged.save_pretrained(tmp)
    tok = load_tokenizer(config.model, required=False)
    if tok is not None:
        tok.save_pretrained(tmp)
    os.replace(tmp, out)
    return out
