"""The payload of ``/update_weights_from_tensor``: named tensors as SGLang's
``MultiprocessingSerializer.serialize(..., output_str=True)`` writes them.

That serializer is ``ForkingPickler(buf).dump(obj)`` then base64; it is reproduced here so a
trainer process without the ``sglang`` package can build the payload (a test checks that
SGLang's own ``MultiprocessingSerializer.deserialize`` reads it back where sglang imports).
Tensors travel as shared-memory / CUDA-IPC handles, so the server must run on this host
(colocated). For CUDA tensors, when sglang is importable, its ``monkey_patch_torch_reductions``
is applied first, as slime does, so devices are named by UUID rather than by a local index.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any


def serialize_named_tensors(weights: Mapping[str, Any], tp_size: int = 1) -> list[str]:
    """One base64 payload of ``[(name, tensor), ...]`` per tensor-parallel rank."""
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # noqa: F401 - registers the tensor reductions ForkingPickler uses

    if any(isinstance(v, torch.Tensor) and v.is_cuda for v in weights.values()):
        try:
            from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions
        except ImportError:  # sglang absent here: devices stay named by index
            pass
        else:
            # only for CUDA: the patch rewrites argument 6 of every tensor reduction, which CPU
            # tensors do not have (it breaks their serialization; test_sglang_types.py)
            monkey_patch_torch_reductions()
    named = []
    for name, value in weights.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"update_weights_from_tensor: {name!r} is a {type(value).__name__}, "
                            "not a torch.Tensor")
        named.append((str(name), value.detach().contiguous()))
    buf = io.BytesIO()
    ForkingPickler(buf).dump(named)
    payload = base64.b64encode(buf.getvalue()).decode("utf-8")
    # every rank deserializes only its own entry (SGLang's TpModelWorker.deserialize_own_rank)
    return [payload] * int(tp_size)
