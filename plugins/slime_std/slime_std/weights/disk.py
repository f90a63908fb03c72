"""The ``disk`` weight transport: a versioned safetensors directory.

A full version is written as ``<weights.dir>/v<version>/model.safetensors``; every directory
is written under a temporary name and renamed into place when complete, so a crash at any
instant leaves no half-written version under a final name (an interrupted writer's temporary
directories are removed when the next transport starts). ``slime_after_weights_written``
fires on the writer (trainer rank 0) after each directory is in place, then the engine side
(:class:`DiskEngineSide`, :func:`receive`) runs in each engine's process: it fires ``slime_before_weights_read`` there
and has the engine load the directory (its own ``update_weights_from_disk`` where it has one,
e.g. an SGLang server or vLLM reloading the files itself; else the tensors are read here and
given to ``update_weights``). Under the ray executor that process is the engine actor
(multi-node: ``weights.dir`` on a shared filesystem).

**Delta versions** (``weights.delta = "xor"`` or ``"overwrite"``): after the first full
version, a sync writes ``<weights.dir>/delta-v<version>/`` with only what changed since the
previous version (encodings, manifest and checks: :mod:`slime_std.weights.delta`). The
transport keeps a CPU copy of the version it sent last to diff against; each engine's process
keeps the tensors its engine received last (the base the next delta applies to). An engine
refuses a delta when it does not serve the delta's base version, does not hold its tensors
(e.g. a restarted process), or a file is missing or fails a checksum: it keeps its weights,
a line on stderr names the tensor or file and the versions, and the transport writes the full
version ``v<version>/`` and has that engine load it, so the sync still completes. Engines
that load files themselves (``update_weights_from_disk``: the vLLM and SGLang plugins) cannot
apply a delta: they always get full versions (written alongside the delta when other engines
take it). ``weights.delta_full_interval = N`` writes a full version every N syncs anyway.

Retention: a delta applies to the reader's in-memory base, never to older files, so after a
sync completes only the two newest versions (full or delta) and the newest full version are
kept; older directories are removed.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slime_core.api import (
    call_engine_side,
    engine_actor_ids,
    get_manager,
    untie,
    weights_nbytes,
)

from slime_std.weights import delta as delta_format

NAME = "disk"
MODEL_FILE = "model.safetensors"
_VERSION_DIR = re.compile(r"^(delta-)?v(\d{6,})$")


def full_dir_name(version: int) -> str:
    return f"v{version:06d}"


def delta_dir_name(version: int) -> str:
    return f"delta-v{version:06d}"


def read_version_dir(version_dir: str, version: int) -> dict[str, Any]:
    """The tensors of a version directory's ``model.safetensors``."""
    from safetensors.torch import load_file

    path = os.path.join(version_dir, MODEL_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weight version {version}: {path} does not exist")
    return load_file(path)


# -- engine side -------------------------------------------------------------------------------
# engine -> (version, tensors it received then): the base the next delta applies to
_held: weakref.WeakKeyDictionary[Any, tuple[int, dict[str, Any]]] = weakref.WeakKeyDictionary()
# the last tensors read or applied in this process, shared by the in-process engines that read
# the same directory (the local executor runs several engines in one process): one copy, one read
_last: tuple[tuple[Any, ...], dict[str, Any]] | None = None


def accepts_delta(engine: Any) -> bool:
    """Whether the engine side can apply delta versions for ``engine``: not for engines that
    read the files themselves (``update_weights_from_disk``)."""
    return not hasattr(engine, "update_weights_from_disk")


def _shared(key: tuple[Any, ...], load: Callable[[], dict[str, Any]],
            keep: bool = True) -> dict[str, Any]:
    global _last
    if not keep:  # without deltas nothing outlives the load
        _last = None
        return load()
    if _last is not None and _last[0] == key:
        return _last[1]
    _last = None  # drop the previous version's tensors before loading the next
    tensors = load()
    _last = (key, tensors)
    return tensors


def _dir_key(version_dir: str) -> tuple[Any, ...]:
    st = os.stat(version_dir)  # a directory renamed into place again gets a new inode / mtime
    return (os.path.realpath(version_dir), st.st_ino, st.st_mtime_ns)


def _hold(engine: Any, version: int, tensors: dict[str, Any] | None) -> None:
    try:
        if tensors is None:
            _held.pop(engine, None)
        else:
            _held[engine] = (version, tensors)
    except TypeError:  # not weak-referenceable: no base is held, so its deltas resync in full
        pass


def receive(engine: Any, version_dir: str, version: int, keep_base: bool = False) -> str | None:
    """Engine side, in the engine's process: ``slime_before_weights_read``, then load.

    A full version loads as before; with ``keep_base`` its tensors are kept as the base of the
    next delta. A delta version (a directory with ``manifest.json``) is applied to the kept
    base. Returns None when the engine serves ``version``, or why it refused the delta (it
    keeps its weights; the sender then resyncs it with a full version).
    """
    get_manager().hook.slime_before_weights_read(version_dir=version_dir, target_version=version)
    if os.path.isfile(os.path.join(version_dir, delta_format.MANIFEST)):
        return _receive_delta(engine, version_dir, version)
    if hasattr(engine, "update_weights_from_disk"):
        engine.update_weights_from_disk(version_dir, version)
        return None
    tensors = _shared(("full", *_dir_key(version_dir)),
                      lambda: read_version_dir(version_dir, version), keep_base)
    engine.update_weights(tensors, version)
    _hold(engine, version, tensors if keep_base else None)
    return None


def _receive_delta(engine: Any, version_dir: str, version: int) -> str | None:
    try:
        if not accepts_delta(engine):
            raise delta_format.DeltaRefused(
                f"delta version {version}: the engine ({type(engine).__name__}) loads files "
                "itself (update_weights_from_disk) and cannot apply a delta")
        manifest = delta_format.read_manifest(version_dir, version)
        serving = int(engine.weight_version())
        if serving != int(manifest["base_version"]):
            raise delta_format.DeltaRefused(
                f"delta version {version} (base {manifest['base_version']}): the engine serves "
                f"version {serving}, not the base")
        base_version, base = _held.get(engine, (None, None))
        tensors = _shared(("delta", *_dir_key(version_dir), id(base)),
                          lambda: delta_format.apply(version_dir, version, base, base_version))
    except delta_format.DeltaRefused as exc:
        print(f"slime: disk transport: refused {version_dir}: {exc}; the engine keeps version "
              f"{engine.weight_version()} and gets a full resync", file=sys.stderr)
        return str(exc)
    engine.update_weights(tensors, version)
    _hold(engine, version, tensors)
    return None


class DiskEngineSide:
    """The record's engine side: :func:`receive` and :func:`accepts_delta` for one engine, in
    its process (the engine actor under the ray executor)."""

    def __init__(self, config: Any, engine: Any) -> None:
        self.engine = engine

    def receive(self, version_dir: str, version: int, keep_base: bool = False) -> str | None:
        return receive(self.engine, version_dir, version, keep_base)

    def accepts_delta(self) -> bool:
        return accepts_delta(self.engine)


# -- trainer side ------------------------------------------------------------------------------
def _host_copy(t: Any) -> Any:
    """A CPU copy that owns its storage: a CPU trainer updates its tensors in place, and the
    copy is the base the next delta is computed against."""
    return t.detach().to("cpu", copy=True).contiguous()


class DiskTransport:
    def __init__(self, config: Any, accelerator: Any = None) -> None:
        self.config = config
        base = config.weights.dir or os.path.join(config.run.run_dir or config.run.output_dir,
                                                  "weights")
        self.root = Path(base)
        self.root.mkdir(parents=True, exist_ok=True)
        for tmp in self.root.glob(".*.tmp-*"):  # an interrupted writer's partial directories
            shutil.rmtree(tmp, ignore_errors=True)
        self.delta: str = config.weights.delta
        self.full_interval: int = config.weights.delta_full_interval
        self._base: dict[str, Any] | None = None  # what every engine got last (a CPU copy)
        self._base_version = -1
        self._deltas_since_full = 0
        self._accepts: dict[Any, bool] = {}  # engine (object id or actor id) -> takes deltas

    def _write(self, name: str, version: int, fill: Callable[[Path], object],
               engines: list[Any]) -> tuple[str, int]:
        """Write a version directory under a temporary name, rename it into place, fire
        ``slime_after_weights_written``; its path and bytes."""
        final = self.root / name
        tmp = self.root / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        fill(tmp)
        size = sum(f.stat().st_size for f in tmp.iterdir())
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        get_manager().hook.slime_after_weights_written(
            config=self.config, version_dir=str(final), engines=engines)
        return str(final), size

    def _receive(self, engine: Any, version_dir: str, version: int) -> str | None:
        """The engine side's :func:`receive`, in the engine's process."""
        return call_engine_side(self.config, engine, NAME, "receive", version_dir, version,
                                self.delta != "off")

    def _accepts_delta(self, i: int, engine: Any) -> bool:
        handle = getattr(engine, "handle", None)  # a Ray engine actor: one answer per actor
        key = engine_actor_ids([handle])[0] if handle is not None else id(engine)
        if key not in self._accepts:
            self._accepts[key] = bool(call_engine_side(self.config, engine, NAME,
                                                       "accepts_delta"))
            if not self._accepts[key]:
                print(f"slime: disk transport: engine {i} loads files itself "
                      "(update_weights_from_disk): it gets full versions, not "
                      f"weights.delta = {self.delta!r}", file=sys.stderr)
        return self._accepts[key]

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        if self.delta != "off":  # kept as the next delta's base: must own its storage
            cpu = {k: _host_copy(v) for k, v in weights.items()}
        else:
            cpu = untie({k: v.detach().contiguous().cpu() for k, v in weights.items()})
        full_due = (self._base is None or set(self._base) != set(cpu)
                    or (self.full_interval > 0 and self._deltas_since_full >= self.full_interval))
        use_delta = self.delta != "off" and not full_due
        to_delta = [e for i, e in enumerate(engines) if use_delta and self._accepts_delta(i, e)]
        to_full = [e for e in engines if not any(e is d for d in to_delta)]
        written = moved = 0
        refused: list[Any] = []
        if to_delta:
            base, base_version = self._base, self._base_version
            assert base is not None
            path, size = self._write(
                delta_dir_name(version), version,
                lambda d: delta_format.write(str(d), cpu, base, self.delta, version,
                                             base_version),
                engines)
            written += size
            for e in to_delta:
                moved += size
                if self._receive(e, path, version) is not None:
                    refused.append(e)
        if to_full or refused or not engines:  # no engines: the version is still written
            path, size = self._write(
                full_dir_name(version), version,
                lambda d: save_file(cpu, str(d / MODEL_FILE)), engines)
            written += size
            for e in to_full + refused:
                moved += size
                reason = self._receive(e, path, version)
                if reason is not None:  # only a delta directory is ever refused
                    raise RuntimeError(f"weight version {version}: an engine refused the full "
                                       f"version {path}: {reason}")
        self._deltas_since_full = self._deltas_since_full + 1 if to_delta else 0
        if self.delta != "off":
            self._base, self._base_version = cpu, version
        self._prune()
        return {"bytes": float(written + moved), "written_bytes": float(written),
                "full_bytes": float(weights_nbytes(cpu)), "delta": float(bool(to_delta)),
                "resyncs": float(len(refused)), "seconds": time.perf_counter() - t0}

    def _prune(self) -> None:
        """Keep the two newest versions and the newest full version (see the module doc)."""
        found: list[tuple[int, bool, Path]] = []
        for p in self.root.iterdir():
            m = _VERSION_DIR.match(p.name)
            if m and p.is_dir():
                found.append((int(m.group(2)), m.group(1) is None, p))
        newest = sorted({v for v, _, _ in found})[-2:]
        fulls = [v for v, is_full, _ in found if is_full]
        newest_full = max(fulls) if fulls else None
        for v, is_full, p in found:
            if v not in newest and not (is_full and v == newest_full):
                shutil.rmtree(p, ignore_errors=True)
