"""The LM head of a CPU decode step, computed in column blocks.

A decode step multiplies a few rows (one per sequence) by the whole output embedding, e.g.
[8, 576] x [576, 49152] for SmolLM2. MKL's sgemm runs that shape far below memory bandwidth on
the CPUs we measured (AMD EPYC, MKL 2024.2: 86 ms for 113 MB of weights, half of a SmolLM2
decode step); the same product split into blocks of 1024 output columns took 47 ms. Each
output column is the same dot product either way, and the blocks gave bitwise-identical
logits for 1 to 32 rows, so the split changes speed only. Inputs with many rows (prefill)
keep the single product.
"""

from __future__ import annotations

from typing import Any

import torch

BLOCK = 1024  # output columns per product: ~2.4 MB of fp32 weights at hidden size 576
MAX_ROWS = 64  # decode-sized inputs only


def block_output_head(model: Any) -> bool:
    """Make ``model``'s output ``nn.Linear`` compute decode-sized inputs in column blocks.

    Only this instance's ``forward`` changes (parameter names, tying and in-place weight
    updates are untouched). Returns False when the head is not a plain wide ``nn.Linear``.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or head.out_features <= 2 * BLOCK:
        return False

    def forward(x: torch.Tensor) -> torch.Tensor:
        w, b = head.weight, head.bias
        if x.numel() // max(1, x.shape[-1]) > MAX_ROWS:
            return torch.nn.functional.linear(x, w, b)
        parts = [torch.nn.functional.linear(x, w[i:i + BLOCK], None if b is None else b[i:i + BLOCK])
                 for i in range(0, head.out_features, BLOCK)]
        return torch.cat(parts, dim=-1)

    head.forward = forward
    return True
