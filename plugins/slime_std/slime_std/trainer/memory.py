"""Memory metrics of a trainer rank: what a run's optimizer holds and the rank's peak.

They make full fine-tuning and adapter training (slime_lora) comparable on one workload:
``train/optimizer_state_mb`` counts AdamW's moments plus the fp32 master copies a bf16/fp16
model keeps (``slime_core.api.make_adamw`` with master weights), ``train/trainable_params`` the
parameters the optimizer steps, and ``perf/peak_memory_gb`` the rank's peak so far: on a CUDA
device its allocator's ``max_memory_allocated`` (tensors only), on the CPU the process's peak
resident set (``ru_maxrss``; under the local executor that includes the engines in the same
process).
"""

from __future__ import annotations

import resource
import sys
from typing import Any

import torch


def _tensor_bytes(values: Any) -> int:
    return sum(int(v.numel()) * int(v.element_size()) for v in values
               if isinstance(v, torch.Tensor))


def memory_metrics(optimizer: torch.optim.Optimizer, device: torch.device) -> dict[str, float]:
    """``train/optimizer_state_mb``, ``train/trainable_params`` and ``perf/peak_memory_gb``."""
    state = sum(_tensor_bytes(s.values()) for s in optimizer.state.values())
    masters = getattr(optimizer, "masters", None)  # MasterAdamW's fp32 copies of the weights
    stepped = getattr(optimizer, "model_params", None)
    if masters is not None:
        state += _tensor_bytes(masters)
    if stepped is None:
        stepped = [p for g in optimizer.param_groups for p in g["params"]]
    out = {"train/optimizer_state_mb": state / 2**20,
           "train/trainable_params": float(sum(int(p.numel()) for p in stepped))}
    # an accelerator's torch module (torch.cuda, torch.npu, ...) keeps its allocator's peak
    peak = getattr(getattr(torch, device.type, None), "max_memory_allocated", None)
    if device.type != "cpu" and callable(peak):
        out["perf/peak_memory_gb"] = peak(device) / 2**30
    elif device.type == "cpu":
        # ru_maxrss is KiB on Linux, bytes on macOS
        scale = 1 if sys.platform == "darwin" else 1024
        out["perf/peak_memory_gb"] = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**30)
    return out
