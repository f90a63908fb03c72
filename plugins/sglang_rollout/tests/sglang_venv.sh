#!/usr/bin/env bash
# Tests that need SGLang's own code or the real sglang-router, each in a throwaway venv
# (never the system python, never a second torch):
#  * sglang 0.5.23 installed with --no-deps (it pins a CUDA torch 2.14.1), plus the light
#    packages its modules import, in a venv that sees the system's torch 2.13.0+cpu and the
#    editable slime packages: runs test_sglang_types.py;
#  * sglang-router (Rust, CPU-only, no torch) in a venv of its own: test_router.py launches it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
VENV="${SLIME_SGLANG_VENV:-/tmp/slime-sglang-venv}"
ROUTER_VENV="${SLIME_SGLANG_ROUTER_VENV:-/tmp/slime-sglang-router-venv}"

# Installed on every run, not only when `import sglang` fails: a venv left by an earlier run
# (CI reuses /tmp) imports sglang but may lack a pin added since (it lacked gguf once); pip
# skips what is already satisfied in a few seconds.
[ -x "$VENV/bin/python" ] || python -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps sglang==0.5.23 \
  psutil==7.2.2 pybase64==1.5.1 triton==3.9.0 starlette==1.10.0 msgspec==0.23.0 \
  pyzmq==27.3.0 apache-tvm-ffi==0.1.11 sentencepiece==0.2.3 compressed-tensors==0.20.1 \
  loguru==0.7.3 openai==3.57.0 partial-json-parser==0.2.1.1.post7 fastapi==0.165.0 \
  uvloop==0.23.0 uvicorn==0.54.0 einops==0.8.2 setproctitle==1.3.8 xgrammar==0.2.9 \
  soundfile==0.14.0 python-multipart==0.0.34 dill==0.4.1 gguf==0.19.0
# the venv sees the packages of the Python running this script (a venv's too, not only the
# base interpreter's: tests/inherit_site.py), so the editable slime packages import there
python tests/inherit_site.py "$VENV" >/dev/null
# the venv must still see the system's CPU torch (--no-deps kept sglang's CUDA torch out)
"$VENV/bin/python" -c "import torch; assert torch.__version__ == '2.13.0+cpu', torch.__version__"
"$VENV/bin/python" -m pytest -q plugins/sglang_rollout/tests/test_sglang_types.py

[ -x "$ROUTER_VENV/bin/python" ] || python -m venv "$ROUTER_VENV"
"$ROUTER_VENV/bin/pip" install -q --disable-pip-version-check sglang-router==0.3.2
SLIME_SGLANG_ROUTER_PYTHON="$ROUTER_VENV/bin/python" \
  python -m pytest -q plugins/sglang_rollout/tests/test_router.py
