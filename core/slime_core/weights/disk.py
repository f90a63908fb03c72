"""The ``disk`` weight transport: a versioned directory per sync, full or delta.

Each version is written as ``<weights.dir>/v<version>/`` (atomically renamed when complete)
holding ``manifest.json`` and either ``model.safetensors`` (a full version) or ``delta.bin``
(``weights.delta = "xor"`` or ``"overwrite"``: only what changed since the version the engines
hold, :mod:`slime_core.weights.delta`). ``slime_after_weights_written`` fires on the writer
(trainer rank 0); then the engine side (:func:`receive`) runs in each engine's process: it
fires ``slime_before_weights_read`` there and loads the version.

Full versions: the engine's own ``update_weights_from_disk`` where it has one (an SGLang server
or vLLM reloading the files itself), else the tensors are read here (per-tensor checksums of
the manifest verified) and given to ``update_weights``. Deltas: applied here to the tensors
this process last loaded for that engine (kept in memory), every checksum verified, then
``update_weights``. An engine refuses a delta (a clear line on stderr naming the reason) when
it holds another version than the delta's base, a file is missing or a checksum fails, or it
loads from disk itself; the writer then writes the same version in full
(``v<version>.full``) and that engine loads it: a sync always completes. The writer also
writes a full version every ``weights.full_every`` syncs (0: only when needed). Under the ray
executor the engine side runs in the engine actor (multi-node: ``weights.dir`` on a shared
filesystem). Versions beyond the two newest are removed (engines hold their base in memory,
not on disk).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from slime_core.weights.buckets import nbytes, untie
from slime_core.weights.delta import DeltaError, apply_delta, encode_delta, tensor_sha256

MANIFEST = "manifest.json"
OK = "ok"
# the tensors each engine of this process last loaded, by id(engine): a delta's base
_BASES: dict[int, tuple[int, dict[str, Any]]] = {}


def read_version_dir(version_dir: str, version: int) -> dict[str, Any]:
    """The tensors of a full version directory, checked against its manifest when it has
    one (a directory written before manifests existed is read as it is)."""
    from safetensors.torch import load_file

    path = os.path.join(version_dir, "model.safetensors")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weight version {version}: {path} does not exist")
    tensors = load_file(path)
    manifest = _manifest(version_dir)
    for name, digest in (manifest or {}).get("sha256", {}).items():
        if name in tensors and tensor_sha256(tensors[name]) != digest:
            raise DeltaError(f"weight version {version}: tensor {name} of {path} does not match "
                             "its checksum (corrupt file)")
    return tensors


def _manifest(version_dir: str) -> dict[str, Any] | None:
    path = os.path.join(version_dir, MANIFEST)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def receive(engine: Any, version_dir: str, version: int) -> str:
    """Engine side, in the engine's process: ``slime_before_weights_read``, then load.
    Returns ``"ok"``, or why a delta was refused (the writer then sends the version in full)."""
    from slime_core.context import get_manager

    get_manager().hook.slime_before_weights_read(version_dir=version_dir, target_version=version)
    manifest = _manifest(version_dir)
    if manifest is not None and manifest.get("kind") == "delta":
        why = _receive_delta(engine, version_dir, version, manifest)
        if why != OK:
            print(f"weights: engine refused delta version {version} ({why}); asking for the "
                  "full version", file=sys.stderr)
        return why
    if hasattr(engine, "update_weights_from_disk"):
        engine.update_weights_from_disk(version_dir, version)
        _BASES.pop(id(engine), None)
    else:
        tensors = read_version_dir(version_dir, version)
        engine.update_weights(tensors, version)
        if manifest is not None and manifest.get("delta_base"):
            _BASES[id(engine)] = (version, tensors)
    return OK


def _receive_delta(engine: Any, version_dir: str, version: int, manifest: dict[str, Any]) -> str:
    if hasattr(engine, "update_weights_from_disk"):
        return "this engine loads weight files itself and cannot apply a delta"
    held = _BASES.get(id(engine))
    base = int(manifest["base_version"])
    if held is None or held[0] != base:
        have = "no base" if held is None else f"version {held[0]}"
        return f"the delta is against version {base}, the engine holds {have}"
    blob_path = os.path.join(version_dir, "delta.bin")
    if not os.path.isfile(blob_path):
        return f"{blob_path} is missing"
    try:
        tensors = apply_delta(manifest, Path(blob_path).read_bytes(), held[1])
    except DeltaError as exc:
        return str(exc)
    engine.update_weights(tensors, version)
    _BASES[id(engine)] = (version, tensors)
    return OK


class DiskTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config
        w = config.weights
        base = w.dir or os.path.join(config.run.run_dir or config.run.output_dir, "weights")
        self.root = Path(base)
        self.root.mkdir(parents=True, exist_ok=True)
        self.delta = w.delta if w.delta != "off" else ""
        self.full_every = int(w.full_every)
        self._base: tuple[int, dict[str, Any]] | None = None  # what every engine holds
        self._since_full = 0
        self._full_only = False  # an engine loads files itself: deltas would always be refused

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        t0 = time.perf_counter()
        # a copy even on the CPU: the trainer updates its tensors in place, and the next
        # delta is taken against these
        cpu = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in weights.items()}
        written = 0
        use_delta = (bool(self.delta) and self._base is not None and not self._full_only
                     and not (self.full_every and self._since_full >= self.full_every))
        if use_delta:
            assert self._base is not None
            final, written = self._write_delta(cpu, version, self._base)
        else:
            final, written = self._write_full(cpu, version, f"v{version:06d}")
        self._hook(final, engines)
        refused = [e for e in engines if self._deliver(e, final, version) != OK]
        if refused:  # a sync always completes: the same version in full for those engines
            full, extra = self._write_full(cpu, version, f"v{version:06d}.full")
            written += extra
            self._hook(full, refused)
            for e in refused:
                why = self._deliver(e, full, version)
                if why != OK:
                    raise RuntimeError(f"weight version {version}: an engine refused the full "
                                       f"version too ({why})")
        self._base = (version, cpu) if self.delta else None
        self._since_full = self._since_full + 1 if use_delta else 0
        for old in self._versions()[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return {"bytes": float(written), "full_bytes": float(nbytes(cpu)),
                "delta": float(use_delta), "resynced_engines": float(len(refused)),
                "seconds": time.perf_counter() - t0}

    # -- writing -----------------------------------------------------------------------------
    def _write_full(self, cpu: dict[str, Any], version: int, name: str) -> tuple[Path, int]:
        from safetensors.torch import save_file

        def write(tmp: Path) -> None:
            save_file(untie(cpu), str(tmp / "model.safetensors"))
            manifest = {"kind": "full", "version": version, "delta_base": bool(self.delta),
                        "sha256": {k: tensor_sha256(v) for k, v in cpu.items()}}
            (tmp / MANIFEST).write_text(json.dumps(manifest))

        final = self._atomic_dir(name, write)
        return final, os.path.getsize(final / "model.safetensors")

    def _write_delta(self, cpu: dict[str, Any], version: int,
                     base: tuple[int, dict[str, Any]]) -> tuple[Path, int]:
        manifest, blob = encode_delta(cpu, base[1], self.delta, base[0])
        manifest["version"] = version

        def write(tmp: Path) -> None:
            (tmp / "delta.bin").write_bytes(blob)
            (tmp / MANIFEST).write_text(json.dumps(manifest))

        return self._atomic_dir(f"v{version:06d}", write), len(blob)

    def _atomic_dir(self, name: str, write: Any) -> Path:
        """Write a version directory under a temporary name, then rename it into place: a
        reader never sees half a version, whatever instant the writer dies at."""
        final = self.root / name
        tmp = self.root / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        write(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        return final

    # -- delivering --------------------------------------------------------------------------
    def _hook(self, final: Path, engines: list[Any]) -> None:
        from slime_core.context import get_manager

        get_manager().hook.slime_after_weights_written(
            config=self.config, version_dir=str(final), engines=engines)

    def _deliver(self, engine: Any, final: Path, version: int) -> str:
        if getattr(engine, "handle", None) is not None:  # a Ray engine actor: receive() runs there
            why = engine.receive_from_disk(str(final), version)
        else:
            why = receive(engine, str(final), version)
        why = OK if why is None else str(why)
        if why.startswith("this engine loads weight files itself"):
            self._full_only = True
        return why

    def _versions(self) -> list[Path]:
        """Version directories, oldest first (a version's ``.full`` right after it)."""
        return sorted(p for p in self.root.glob("v*") if p.is_dir())

