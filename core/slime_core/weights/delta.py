"""Delta encodings of a weight version against the one an engine holds (``weights.delta``).

Between two syncs most of a model's bytes do not change: bf16 weights at RL learning rates
move only where an update crosses their spacing, and fp32 weights change in their low bits.
A delta stores, per tensor that changed:

* ``xor``: the new tensor's bytes XOR the base's, zlib-compressed (the equal high bytes and
  the unchanged elements become runs of zeros); exact for every dtype;
* ``overwrite``: the positions that changed (int64 flat indices) and their new values, or the
  whole tensor when those pairs would take more bytes than it.

A delta file is one binary blob (the encoded tensors one after the other) with a JSON manifest:
the base version, the blob's sha256, and for every tensor its dtype, shape, encoding, offset
and length in the blob and the sha256 of the tensor it must produce. :func:`apply_delta`
checks all of them and raises :class:`DeltaError` naming the tensor at the first mismatch, so
an engine never loads weights that differ from the trainer's.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

import torch

ENCODINGS = ("xor", "overwrite")
# bytes of each element as an integer dtype of the same width, for XOR and equality
_INT_OF = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class DeltaError(ValueError):
    """A delta cannot be applied: wrong base, missing or corrupt data."""


def tensor_sha256(t: torch.Tensor) -> str:
    """Digest of a tensor's dtype, shape and bytes (contiguous, on the CPU)."""
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(_bytes(t))
    return h.hexdigest()


def _bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().contiguous().cpu().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _as_int(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().cpu().reshape(-1).view(_INT_OF[t.element_size()])


def encode_delta(new: dict[str, torch.Tensor], base: dict[str, torch.Tensor], encoding: str,
                 base_version: int) -> tuple[dict[str, Any], bytes]:
    """``(manifest, blob)`` that turn ``base`` into ``new``; tensors equal in both are left
    out (the manifest lists them as unchanged, with their digest)."""
    if encoding not in ENCODINGS:
        raise ValueError(f"weights.delta: {encoding!r} is not one of {', '.join(ENCODINGS)}")
    if set(new) != set(base):
        raise DeltaError("the tensor names differ from the base's: a delta needs the same model")
    parts: list[bytes] = []
    offset = 0
    tensors: dict[str, Any] = {}
    for name, t in new.items():
        b = base[name]
        entry: dict[str, Any] = {"dtype": str(t.dtype).removeprefix("torch."),
                                 "shape": list(t.shape), "sha256": tensor_sha256(t)}
        if t.dtype != b.dtype or t.shape != b.shape:
            raise DeltaError(f"tensor {name}: dtype/shape changed since the base version")
        ni, bi = _as_int(t), _as_int(b)
        changed = ni != bi
        n = int(changed.sum())
        if n == 0:
            entry["encoding"] = "same"
        elif encoding == "xor":
            payload = zlib.compress((ni ^ bi).view(torch.uint8).numpy().tobytes(), 1)
            entry["encoding"] = "xor"
        elif n * (8 + t.element_size()) >= ni.numel() * t.element_size():
            # (index, value) pairs would outweigh the tensor itself
            payload = _bytes(t)
            entry["encoding"] = "whole"
        else:
            idx = changed.nonzero().reshape(-1).to(torch.int64)
            payload = _bytes(idx) + _bytes(ni[idx])
            entry["encoding"] = "positions"
            entry["count"] = n
        if entry["encoding"] != "same":
            entry["offset"], entry["length"] = offset, len(payload)
            parts.append(payload)
            offset += len(payload)
        tensors[name] = entry
    blob = b"".join(parts)
    manifest = {"kind": "delta", "encoding": encoding, "base_version": int(base_version),
                "blob_sha256": hashlib.sha256(blob).hexdigest(), "tensors": tensors}
    return manifest, blob


def apply_delta(manifest: dict[str, Any], blob: bytes,
                base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors ``manifest`` and ``blob`` make of ``base``, every digest checked."""
    if hashlib.sha256(blob).hexdigest() != manifest.get("blob_sha256"):
        raise DeltaError("the delta file's checksum does not match its manifest (corrupt or "
                         "partly written)")
    entries = manifest["tensors"]
    if set(entries) != set(base):
        raise DeltaError("the delta's tensor names differ from the weights the engine holds")
    out: dict[str, torch.Tensor] = {}
    for name, e in entries.items():
        b = base[name].detach().contiguous().cpu()
        kind = e["encoding"]
        if kind == "same":
            t = b
        else:
            payload = blob[e["offset"]:e["offset"] + e["length"]]
            if len(payload) != e["length"]:
                raise DeltaError(f"tensor {name}: the delta file is shorter than its manifest")
            t = _decode(name, kind, payload, b, e)
        if tensor_sha256(t) != e["sha256"]:
            raise DeltaError(f"tensor {name}: checksum mismatch after applying the delta "
                             "(wrong base or corrupt data)")
        out[name] = t
    return out


def _decode(name: str, kind: str, payload: bytes, base: torch.Tensor,
            e: dict[str, Any]) -> torch.Tensor:
    int_dtype = _INT_OF[base.element_size()]
    try:
        if kind == "xor":
            raw = bytearray(zlib.decompress(payload))
            x = torch.frombuffer(raw, dtype=torch.uint8).view(int_dtype) if raw else \
                torch.empty(0, dtype=int_dtype)
            if x.numel() != base.numel():
                raise DeltaError(f"tensor {name}: the xor payload has {x.numel()} elements, the "
                                 f"base {base.numel()}")
            return (_as_int(base) ^ x).view(base.dtype).reshape(base.shape)
        if kind == "whole":
            raw = bytearray(payload)
            return torch.frombuffer(raw, dtype=base.dtype).reshape(base.shape).clone()
        if kind == "positions":
            n = int(e["count"])
            raw = bytearray(payload)
            idx = torch.frombuffer(raw, dtype=torch.int64, count=n)
            vals = torch.frombuffer(raw, dtype=int_dtype, offset=8 * n, count=n)
            if int(idx.max()) >= base.numel() or int(idx.min()) < 0:
                raise DeltaError(f"tensor {name}: a position is outside the tensor")
            out = _as_int(base).clone()
            out[idx] = vals
            return out.view(base.dtype).reshape(base.shape)
    except (zlib.error, ValueError, RuntimeError) as exc:
        if isinstance(exc, DeltaError):
            raise
        raise DeltaError(f"tensor {name}: the {kind} payload does not decode ({exc})") from None
    raise DeltaError(f"tensor {name}: unknown encoding {kind!r}")
