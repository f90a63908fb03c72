"""Turn the last checkpoint of a run into a model directory ``model.path`` can load.

    python examples/agentic_arith/export_model.py runs/agentic_arith/sft examples/agentic_arith/model

Writes ``config.json`` (from the run's ``model.init_config``) and the checkpoint's
``model.safetensors`` into the output directory. The tokenizer stays where it is
(``model.tokenizer``): saved next to a ``config.json`` that says qwen2, transformers would
load it as a Qwen2 tokenizer, which drops the newlines around the added tags.
"""

from __future__ import annotations

import argparse
import shutil
import tomllib
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args()
    from transformers import AutoConfig

    config = tomllib.loads((args.run_dir / "config.toml").read_text())
    init = dict(config["model"]["init_config"])
    if not init:
        raise SystemExit(f"{args.run_dir}: model.init_config is empty (not a run built from a config)")
    latest = (args.run_dir / "checkpoints" / "latest").read_text().strip()
    weights = args.run_dir / "checkpoints" / latest / "trainer" / "model.safetensors"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model_type = init.pop("model_type")
    AutoConfig.for_model(model_type, **init).save_pretrained(str(args.out_dir))
    shutil.copyfile(weights, args.out_dir / "model.safetensors")
    print(f"exported {weights} -> {args.out_dir}")


if __name__ == "__main__":
    main()
