"""After a weight update, read a few tensors back from the server and compare them.

``/model_info`` says which version a server holds, not what its weights are. SGLang's
``/get_weights_by_name`` returns the first ``truncate_size`` rows of a parameter by its Hugging
Face name (the model maps stacked q/k/v and gate/up names), as float32 lists; comparing the
first rows of a few tensors (the embedding, the final norm, the first layer's query projection,
the last layer's down projection) with what the trainer sent catches a server that acknowledged
an update but kept old, partial or mis-mapped weights. The comparison is exact after float32
conversion of what was sent, rounded first to the dtype the server holds when slime knows it
(``rollout.dtype`` or ``model.dtype``, or ``sglang.server_args``' ``dtype``: an fp32 trainer's
tensors held in bf16 read back as their bf16 rounding).

Models whose SGLang class has no ``get_weights_by_name`` (Qwen2's, among others, in 0.5.17)
answer with an error: the check then says once that it cannot run and stops asking.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

ROWS = 2  # rows compared per matrix: enough to catch stale or shuffled weights, a few KB
VALUES = 4096  # values compared per vector (a norm's weight: all of it)


def truncate_size(tensor: Any) -> int:
    """What to ask ``/get_weights_by_name`` for: ``ROWS`` rows of a matrix, up to ``VALUES``
    values of a vector."""
    return ROWS if tensor.dim() >= 2 else min(int(tensor.numel()), VALUES)


def pick_names(names: Iterable[str]) -> list[str]:
    """The tensors to compare: embedding, final norm, first q_proj, last down_proj (those
    present); else the first and last names in sorted order."""
    every = sorted(names)
    layers = sorted({int(m.group(1)) for n in every
                     if (m := re.match(r"model\.layers\.(\d+)\.", n))})
    wanted = ["model.embed_tokens.weight", "model.norm.weight"]
    if layers:
        wanted += [f"model.layers.{layers[0]}.self_attn.q_proj.weight",
                   f"model.layers.{layers[-1]}.mlp.down_proj.weight"]
    present = set(every)
    chosen = [n for n in wanted if n in present]
    if chosen or not every:
        return chosen
    return sorted({every[0], every[-1]})


def expected_rows(tensor: Any, served: str | None = None) -> list[Any]:
    """What ``/get_weights_by_name`` answers for ``tensor`` asked with
    :func:`truncate_size`: its first rows (a vector: its first values) as float32 lists,
    after rounding to the ``served`` dtype name (``"bfloat16"``; None: as sent)."""
    import torch

    head = tensor.detach()[:truncate_size(tensor)].to(device="cpu")
    if served is not None and head.is_floating_point():
        head = head.to(getattr(torch, served))
    return head.to(dtype=torch.float32).tolist()


def compare(version: int, fetch: Callable[[str, int], Any],
            expected: Mapping[str, tuple[int, Any]]) -> str | None:
    """``None`` when every tensor's rows equal; else the first difference, named.

    ``fetch(name, truncate_size)`` is the server's answer for ``name``; ``expected`` maps names
    to ``(truncate_size, expected_rows)``.
    """
    for name, (size, want) in expected.items():
        got = fetch(name, size)
        if got != want:
            return (f"weights of version {version}: {name} differs from what was sent "
                    f"(first rows: server {_head(got)} != sent {_head(want)})")
    return None


def _head(rows: Any) -> str:
    flat: list[Any] = []
    for r in rows if isinstance(rows, list) else [rows]:
        flat.extend(r if isinstance(r, list) else [r])
        if len(flat) >= 3:
            break
    return repr(flat[:3])


def tensors_from_dir(version_dir: str) -> dict[str, Any]:
    """The heads of the compared tensors of a version directory's ``*.safetensors``: their
    first ``ROWS`` rows (a vector: its first ``VALUES`` values), read as slices, so a sync
    reads a few KB back, not whole embedding matrices."""
    import glob
    import os

    from safetensors import safe_open

    out: dict[str, Any] = {}
    for path in sorted(glob.glob(os.path.join(version_dir, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for key in pick_names(f.keys()):
                part = f.get_slice(key)
                out[key] = part[:ROWS] if len(part.get_shape()) >= 2 else part[:VALUES]
    # several files: each offered its own picks; keep the model-wide ones
    return {k: out[k] for k in pick_names(out)} if len(out) > 4 else out
