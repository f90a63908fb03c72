"""Process-wide torch settings of a run, applied in every process that runs its components.

The driver applies them to itself, each Ray worker and each spawned local rank in
:func:`slime_core.executors.ray_workers.bootstrap`, before any model is built, so that a
component behaves the same whichever process the executor put it in.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from slime_core.runtime import host_memory

# the cache each compiler reads its directory from, and the subdirectory of
# run.compile_cache_dir it gets
COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def apply(config: Any) -> None:
    """``run.num_threads`` (torch intra-op threads), ``run.cudnn_attention``,
    ``run.matmul_precision``, ``run.compile_cache_dir`` and ``run.retain_host_memory``
    (:mod:`host_memory`: only ``true`` acts, and it cannot be undone in the process; an
    unresolved ``auto`` stays off).

    ``run.cudnn_attention = false`` takes cuDNN out of the backends torch's
    ``scaled_dot_product_attention`` may pick (flash, memory-efficient and math remain). cuDNN
    builds an execution graph for every new attention shape, which costs hundreds of
    milliseconds on Hopper GPUs, and an RL run's shapes change every step (prompt widths in
    prefill, micro-batch lengths in training). The setting is process-wide in torch, so it
    is one key for the rollout and the trainer alike (they may share a process and threads).
    """
    import torch

    if config.run.num_threads:
        torch.set_num_threads(config.run.num_threads)
    # set both ways: a process that ran an earlier configuration in-process (tests, notebooks)
    # must not keep its value
    torch.backends.cuda.enable_cudnn_sdp(bool(config.run.cudnn_attention))
    # process-wide like cuDNN's switch: the engine and the trainer may share the process, and
    # a log-prob mismatch between them must not come from one using TF32 and the other not
    torch.set_float32_matmul_precision(config.run.matmul_precision)
    set_compile_caches(config.run.compile_cache_dir)
    if config.run.retain_host_memory is True:
        why_not = host_memory.retain_freed_memory()
        if why_not:
            warnings.warn(f"run.retain_host_memory: {why_not}; freed memory goes back to the "
                          "operating system as usual", stacklevel=2)


def set_compile_caches(root: str) -> dict[str, str]:
    """Point inductor's and Triton's on-disk caches under ``root`` (``~`` expanded) unless the
    environment names them already; return the variables set.

    Both compilers read their directory from the environment when they compile, not at
    import, so setting it before the first compilation is enough. torch's default inductor
    cache lives under the system's temporary directory (lost on reboot, per user) and
    Triton's under ``~/.triton``; one documented directory lets a user keep, copy or clear
    a model's compiled code, and makes the second run of the same shapes skip the work."""
    if not root:
        return {}
    base = Path(os.path.expanduser(root))
    done = {}
    for var, sub in COMPILE_CACHES.items():
        if not os.environ.get(var):
            os.environ[var] = done[var] = str(base / sub)
    return done
