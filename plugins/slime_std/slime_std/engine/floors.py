"""Floors of the local engine's phases: the least time a phase could take on this device.

A phase's floor is ``max(bytes it must read / memory bandwidth, FLOPs / peak FLOP rate)``:
what the hardware cannot go below, whatever the software does. Both sides are **estimates**:

* bytes and FLOPs come from the model's shape (:class:`ModelCost`): a forward reads every
  weight it multiplies by once (the input embedding is a gather of a few rows, so it is left
  out unless the output head shares it) and the key/value cache of every position a query
  attends to; it does ``2 * parameters`` FLOPs per token in the layers, ``2 * vocab *
  hidden`` per row whose logits are computed and ``4 * layers * heads * head_dim`` per
  (query, key) pair of attention. A prefill counts each distinct prompt's real tokens once
  (padding and a group's repeated prompt are no work the floor needs). Activations, norms
  and the sampler's passes are left out, so the floors are optimistic, as floors should be. Mixture-of-experts models get no floors
  (which experts a token reads depends on the data).
* the peak FLOP rate and the bandwidth are ``profile.peak_tflops`` / ``profile.memory_gbps``
  when set, else measured once per process and device (:func:`calibrate`): the best of a few
  square matrix products in the engine's dtype and of a few copies of a large buffer
  (read + write counted). Rough numbers: a CPU shared with other work measures low.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

_CALIBRATED: dict[tuple[str, str], tuple[float, float]] = {}


@dataclass(frozen=True)
class ModelCost:
    """What one forward of a dense causal LM reads and computes, by shape."""

    weight_bytes: int  # weights a forward multiplies by (the output head included)
    layer_params: int  # parameters of the decoder layers (2 FLOPs each per token)
    head_params: int  # vocab * hidden of the output head (2 FLOPs each per logits row)
    kv_bytes_per_token: int  # keys + values of one position over every layer
    attn_flops_per_pair: int  # 4 * layers * heads * head_dim: one query against one key
    vocab: int

    def prefill(self, lengths: list[int], distinct: list[int],
                prefix: int = 0) -> tuple[float, float]:
        """(bytes, FLOPs) of a prefill of prompts of ``lengths`` tokens (each row's keys and
        values written) of which the ``distinct`` lengths' must be computed (a group's rows
        share a prompt), their first ``prefix`` tokens once for all (a common prefix):
        padding is no work a floor needs, nor is a token computed twice. Logits of the last
        position only."""
        rest = [n - prefix for n in distinct]
        # causal: position i sees i + 1 keys; the rest of a prompt sees the prefix too
        pairs = prefix * (prefix + 1) / 2 + sum(n * prefix + n * (n + 1) / 2 for n in rest)
        flops = (2 * self.layer_params * (prefix + sum(rest))
                 + 2 * self.head_params * len(distinct) + self.attn_flops_per_pair * pairs)
        return float(self.weight_bytes + sum(lengths) * self.kv_bytes_per_token), float(flops)

    def decode(self, rows: int, context: int) -> tuple[float, float]:
        """(bytes, FLOPs) of one decode step of ``rows`` rows attending to ``context``
        positions each (prompt width + tokens so far + this one)."""
        flops = (2 * (self.layer_params + self.head_params) * rows
                 + self.attn_flops_per_pair * rows * context)
        return float(self.weight_bytes + rows * context * self.kv_bytes_per_token), float(flops)

    def sample(self, rows: int) -> tuple[float, float]:
        """(bytes, FLOPs) of choosing the next tokens: one read of the fp32 logits."""
        return float(rows * self.vocab * 4), 0.0


def config_head_dim(cfg: Any) -> int:
    """The attention heads' dimension of a transformers config (or a namespace of its
    ``config.json``): ``head_dim`` where the family sets one apart, else ``hidden_size /
    num_attention_heads``."""
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def model_cost(model: Any, dtype: torch.dtype) -> ModelCost | None:
    """The :class:`ModelCost` of a dense transformers causal LM; None when its shape is not
    readable (no ``.model.layers``, no head count)."""
    cfg = model.config
    layers = getattr(getattr(model, "model", None), "layers", None)
    heads = getattr(cfg, "num_attention_heads", None)
    hidden = getattr(cfg, "hidden_size", None)
    if layers is None or not heads or not hidden:
        return None
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = config_head_dim(cfg)
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    head_w = head.weight if head is not None else embed
    total = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: counted once
    weight_bytes = total - embed.numel() * embed.element_size()
    if head_w is embed:  # the tied head multiplies by the embedding matrix every forward
        weight_bytes += embed.numel() * embed.element_size()
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return ModelCost(
        weight_bytes=int(weight_bytes),
        layer_params=int(sum(p.numel() for p in layers.parameters())),
        head_params=int(head_w.numel()),
        kv_bytes_per_token=int(len(layers) * 2 * kv_heads * head_dim * itemsize),
        attn_flops_per_pair=int(4 * len(layers) * heads * head_dim),
        vocab=int(head_w.shape[0]),
    )


def calibrate(device: torch.device, dtype: torch.dtype, size: int | None = None,
              buffer_bytes: int | None = None, reps: int = 3) -> tuple[float, float]:
    """(peak FLOP/s, bandwidth bytes/s) measured on ``device``: the best of ``reps`` products
    of two ``size`` x ``size`` matrices in ``dtype`` and of ``reps`` copies of a buffer of
    ``buffer_bytes`` (read and written: twice its size moved). Cached per device and dtype
    (the defaults' sizes; tests pass small ones, which are not cached)."""
    key = (str(device), str(dtype))
    default = size is None and buffer_bytes is None
    if default and key in _CALIBRATED:
        return _CALIBRATED[key]
    # an accelerator needs big operands to reach its peak; a CPU core a small one, quickly
    accelerator = device.type != "cpu"
    n = size or (8192 if accelerator else 768)
    nbytes = buffer_bytes or (1 << 30 if accelerator else 64 << 20)
    module = getattr(torch, device.type, None)  # torch.cuda, torch.npu, ...: its own sync
    sync = getattr(module, "synchronize", None) if device.type != "cpu" else None

    def best(fn: Any) -> float:
        times = []
        for i in range(reps + 1):  # the first is a warm-up (allocation, kernel selection)
            t = time.perf_counter()
            fn()
            if sync is not None:
                sync(device)
            if i:
                times.append(time.perf_counter() - t)
        return max(min(times), 1e-9)

    def products() -> float:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        return 2 * n ** 3 / best(lambda: torch.mm(a, b))

    def copies() -> float:
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        return 2 * src.numel() * 4 / best(lambda: dst.copy_(src))

    peak, bandwidth = products(), copies()
    empty = getattr(module, "empty_cache", None) if device.type != "cpu" else None
    if empty is not None:  # give the buffers back to a colocated trainer
        empty()
    if default:
        _CALIBRATED[key] = (peak, bandwidth)
    return peak, bandwidth
