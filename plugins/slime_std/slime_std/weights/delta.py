"""Delta versions of the ``disk`` transport: encode what changed since a base version, apply
it on the engine side, verify every byte.

A delta version directory holds ``delta.safetensors`` (one compressed ``uint8`` payload per
changed tensor) and ``manifest.json``::

    {"format": 1, "version": 7, "base_version": 6, "encoding": "xor", "compression": "zlib",
     "checksum": "sha256", "file": "delta.safetensors", "file_checksum": "...",
     "unchanged": [names...],
     "tensors": {name: {"kind": "xor" | "overwrite" | "raw", "dtype": "float32", "shape": [..],
                        "count": changed elements (overwrite), "checksum": "<of the result>"}}}

Per changed tensor, against the raw bytes of the base version's tensor:

* ``xor``: ``new ^ base`` over the raw bytes. Unchanged bytes are zeros, so it compresses
  well (bf16 weights at a small learning rate mostly keep their bytes; fp32 weights change in
  their low mantissa bytes while the high bytes stay). An involution: it must be applied
  exactly once to exactly the base, which the base-version check and the checksum of the
  result guarantee.
* ``overwrite``: the indices of the changed elements (int32, or int64 past 2**31 elements)
  then their new values; idempotent. A tensor whose changed elements would cost more than
  the tensor itself is stored whole (``raw``), as is one the base lacks or has with another
  dtype or shape.

Comparisons are on raw bits (never float ``==``: ``-0.0 == 0.0`` and ``nan != nan``), so the
applied result equals the sent tensor bit for bit. Unchanged tensors are not in the file; the
reader keeps its base's. Any mismatch (base version, a name, a dtype or shape, a checksum, a
missing or unreadable file) raises :class:`DeltaRefused` naming what failed: the engine keeps
its weights and the transport resyncs it with a full version.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from typing import Any

MANIFEST = "manifest.json"
DELTA_FILE = "delta.safetensors"
FORMAT = 1
ENCODINGS = ("xor", "overwrite")


class DeltaRefused(Exception):
    """A delta version the reader cannot apply; the message names the tensor or file."""


def _raw(t: Any) -> Any:
    """The raw bytes of ``t`` as a flat uint8 tensor (a view when it is contiguous)."""
    import torch

    return t.contiguous().reshape(-1).view(torch.uint8)


def _bits(t: Any) -> Any:
    """``t``'s elements as same-sized integers: compares and copies bits, not float values."""
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().reshape(-1).view(ints[t.element_size()])


def checksum(t: Any) -> str:
    """sha256 of the tensor's raw bytes (its dtype and shape are checked separately)."""
    return hashlib.sha256(_raw(t).numpy()).hexdigest()


def _file_checksum(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _dtype(name: str) -> Any:
    import torch

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise DeltaRefused(f"unknown dtype {name!r} in the manifest")
    return dt


def _u8(data: bytes) -> Any:
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
        torch.empty(0, dtype=torch.uint8)


def encode(new: dict[str, Any], base: dict[str, Any], encoding: str) \
        -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[str]]:
    """``(payloads, entries, unchanged)``: compressed payload and manifest entry per changed
    tensor of ``new`` against ``base`` (both CPU tensors), and the names that did not change."""
    import torch

    if encoding not in ENCODINGS:
        raise ValueError(f"weights.delta: unknown encoding {encoding!r}; choose {ENCODINGS}")
    payloads: dict[str, Any] = {}
    entries: dict[str, dict[str, Any]] = {}
    unchanged: list[str] = []
    for name, t in new.items():
        b = base.get(name)
        entry: dict[str, Any] = {"dtype": str(t.dtype).removeprefix("torch."),
                                 "shape": list(t.shape)}
        if b is None or b.dtype != t.dtype or b.shape != t.shape:
            entry["kind"], payload = "raw", _raw(t)
        elif encoding == "xor":
            payload = torch.bitwise_xor(_raw(t), _raw(b))
            if not bool(payload.any()):
                unchanged.append(name)
                continue
            entry["kind"] = "xor"
        else:
            nb = _bits(t)
            idx = torch.nonzero(nb != _bits(b)).reshape(-1)
            if idx.numel() == 0:
                unchanged.append(name)
                continue
            wide = t.numel() > 2**31 - 1
            idx_bytes = _raw(idx.to(torch.int64 if wide else torch.int32))
            if idx_bytes.numel() + idx.numel() * t.element_size() >= t.numel() * t.element_size():
                entry["kind"], payload = "raw", _raw(t)  # cheaper whole
            else:
                entry["kind"], entry["count"] = "overwrite", int(idx.numel())
                payload = torch.cat([idx_bytes, _raw(nb[idx])])
        payloads[name] = _u8(zlib.compress(payload.numpy(), 1))
        entry["checksum"] = checksum(t)
        entries[name] = entry
    return payloads, entries, unchanged


def write(directory: str, new: dict[str, Any], base: dict[str, Any], encoding: str,
          version: int, base_version: int) -> dict[str, Any]:
    """Write ``directory``'s ``delta.safetensors`` and ``manifest.json`` (the caller renames the
    directory into place); the manifest."""
    from safetensors.torch import save_file

    payloads, entries, unchanged = encode(new, base, encoding)
    path = os.path.join(directory, DELTA_FILE)
    save_file(payloads, path)
    manifest = {"format": FORMAT, "version": int(version), "base_version": int(base_version),
                "encoding": encoding, "compression": "zlib", "checksum": "sha256",
                "file": DELTA_FILE, "file_checksum": _file_checksum(path),
                "unchanged": unchanged, "tensors": entries}
    with open(os.path.join(directory, MANIFEST), "w") as fh:
        json.dump(manifest, fh)
        fh.flush()
        os.fsync(fh.fileno())
    return manifest


def read_manifest(directory: str, version: int) -> dict[str, Any]:
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError) as exc:
        raise DeltaRefused(f"delta version {version}: {path} is unreadable ({exc})") from exc
    if manifest.get("format") != FORMAT or manifest.get("version") != version:
        raise DeltaRefused(f"delta version {version}: {path} is format "
                           f"{manifest.get('format')} of version {manifest.get('version')}, "
                           f"expected format {FORMAT} of version {version}")
    return manifest


def apply(directory: str, version: int, base: dict[str, Any] | None,
          base_version: int | None) -> dict[str, Any]:
    """The full weights of ``version``: the delta in ``directory`` applied to ``base`` (the
    tensors the reader received at ``base_version``; unchanged tensors are ``base``'s own).
    Every check runs before anything is returned; a failure raises :class:`DeltaRefused`."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    manifest = read_manifest(directory, version)
    want = int(manifest["base_version"])
    where = f"delta version {version} (base {want})"
    if base is None or base_version != want:
        raise DeltaRefused(f"{where}: the reader holds the tensors of version "
                           f"{base_version if base is not None else 'none'}, not the base")
    names = set(manifest["unchanged"]) | set(manifest["tensors"])
    if names != set(base):
        odd = sorted(names ^ set(base))[:3]
        raise DeltaRefused(f"{where}: tensor names differ from the base's (e.g. {odd})")
    path = os.path.join(directory, manifest["file"])
    if not os.path.isfile(path):
        raise DeltaRefused(f"{where}: {path} is missing")
    if _file_checksum(path) != manifest["file_checksum"]:
        raise DeltaRefused(f"{where}: {path} fails its checksum (corrupt or partly written)")
    try:
        payloads = load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise DeltaRefused(f"{where}: {path} is unreadable ({exc})") from exc
    out = dict(base)
    for name, entry in manifest["tensors"].items():
        if name not in payloads:
            raise DeltaRefused(f"{where}: tensor {name!r} is missing from {path}")
        try:
            data = _u8(zlib.decompress(payloads[name].numpy().tobytes()))
        except zlib.error as exc:
            raise DeltaRefused(f"{where}: tensor {name!r} in {path} does not decompress "
                               f"({exc})") from exc
        dtype, shape = _dtype(entry["dtype"]), tuple(entry["shape"])
        nbytes = torch.empty(0, dtype=dtype).element_size() * int(torch.Size(shape).numel())
        b = base[name]
        kind = entry["kind"]
        if kind != "raw" and (b.dtype != dtype or tuple(b.shape) != shape):
            raise DeltaRefused(f"{where}: tensor {name!r} is {b.dtype}{tuple(b.shape)} in the "
                               f"base, the delta is against {dtype}{shape}")
        if kind == "raw" and data.numel() == nbytes:
            new = data.view(dtype).reshape(shape)
        elif kind == "xor" and data.numel() == nbytes:
            new = torch.bitwise_xor(_raw(b), data).view(dtype).reshape(shape)
        elif kind == "overwrite":
            n, wide = int(entry["count"]), b.numel() > 2**31 - 1
            isz = 8 if wide else 4
            if data.numel() != n * (isz + b.element_size()):
                raise DeltaRefused(f"{where}: tensor {name!r} in {path} has {data.numel()} "
                                   f"bytes, not the {n} changed elements the manifest says")
            idx = data[:n * isz].view(torch.int64 if wide else torch.int32).long()
            bits = _bits(b).clone()
            if n and (int(idx.min()) < 0 or int(idx.max()) >= bits.numel()):
                raise DeltaRefused(f"{where}: tensor {name!r} in {path} indexes outside it")
            bits[idx] = data[n * isz:].view(bits.dtype)
            new = bits.view(dtype).reshape(shape)
        else:
            raise DeltaRefused(f"{where}: tensor {name!r} in {path}: kind {kind!r} with "
                               f"{data.numel()} bytes for {dtype}{shape}")
        if checksum(new) != entry["checksum"]:
            raise DeltaRefused(f"{where}: tensor {name!r} fails its checksum after applying "
                               f"{path}")
        out[name] = new
    return out
