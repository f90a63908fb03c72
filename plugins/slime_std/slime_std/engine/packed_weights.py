"""A CPU engine's decode products from weights kept in oneDNN's blocked layout
(``rollout.packed_weights``).

A decode step multiplies a few rows (the batch) by every weight of the model, so it is bound
by reading the weights from memory. On the CPU torch's product streams them well below what
the memory gives: on a 2-core EPYC with avx512_bf16, a SmolLM2-shaped step's products (8
rows, 30 layers and the head) took 26.0 ms in bf16 (10.3 GB/s; 39.7 ms, 13.5 GB/s in fp32)
while a sum over the same bytes read 28-31 GB/s. oneDNN's linear over a weight reordered once
into its blocked layout (the form inductor's CPU freezing uses) took 14.5 ms (18.5 GB/s) and
25.6 ms (21.0 GB/s); one generate of 8 x 128 tokens 6.2 -> 4.1 s and 8.3 -> 5.2 s
(``bench/cpu_packed_weights.py``). An older AVX2-only VM saw no gain from packing (bench
README, 2026-11-30): the gain is the CPU's.

The packed tensor is a copy (the engine's weight memory doubles), so every weight update is
followed by a repack of what it changed (SmolLM2 whole: 0.11 s bf16, 0.16 s fp32). Same sums
in another order: logits agree with the plain product to float rounding.
"""

from __future__ import annotations

import torch

# the packing op's batch-size hint: decode-sized products
_ROWS_HINT = 8


def unsupported(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why a ``dtype`` engine on ``device`` cannot pack its weights (None when it can)."""
    if device.type != "cpu":
        return f"the engine runs on {device.type}, packing is for CPU engines"
    if not torch.backends.mkldnn.is_available():
        return "this torch was built without oneDNN (torch.backends.mkldnn)"
    if dtype == torch.float32:
        return None
    if dtype == torch.bfloat16:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return "this CPU has no bf16 support in oneDNN (avx512_bf16 / AMX)"
        return None
    return f"{dtype} weights are not packed (float32 and bfloat16 are)"


def pack(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's blocked copy of ``weight`` [N, K] (an opaque ``torch._mkldnn`` tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _ROWS_HINT)


def packed_linear(x: torch.Tensor, packed: torch.Tensor,
                  bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ W^T (+ bias)`` for a 2-D ``x``, ``packed`` being :func:`pack` of ``W``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [None], "")
