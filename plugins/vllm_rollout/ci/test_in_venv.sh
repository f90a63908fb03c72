#!/usr/bin/env bash
# Build (or reuse) the vLLM CPU venv and run the vllm_rollout tests on the real vLLM there.
set -euo pipefail
cd "$(dirname "$0")/../../.."
bash plugins/vllm_rollout/ci/make_env.sh
"${VLLM_VENV:-/tmp/slime-vllm-venv}/bin/python" -m pytest plugins/vllm_rollout/tests -q
