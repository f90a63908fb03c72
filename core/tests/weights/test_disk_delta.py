"""The disk transport's delta versions: exact weights through several syncs, fewer bytes than
full versions, and a corrupt or unusable delta refused by the engine and replaced by a full
version in the same sync."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.config import ConfigError
from slime_core.context import set_manager
from slime_core.engine.local_engine import LocalEngine
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.testing import build_test_config
from slime_core.weights import delta as delta_mod
from slime_core.weights.disk import DiskTransport
from slime_hookspecs import hookimpl

MODEL = Path(__file__).resolve().parents[3] / "examples" / "tiny_arith" / "model"


class Corrupter:
    """After a delta version is written and before any engine reads it, flip one byte."""

    def __init__(self) -> None:
        self.armed = False
        self.corrupted: list[str] = []

    @hookimpl
    def slime_after_weights_written(self, config: Any, version_dir: str, engines: Any) -> None:
        blob = Path(version_dir) / "delta.bin"
        if self.armed and blob.is_file():
            data = bytearray(blob.read_bytes())
            data[len(data) // 2] ^= 0xFF
            blob.write_bytes(bytes(data))
            self.corrupted.append(version_dir)
            self.armed = False


def _setup(tmp_path: Path, encoding: str = "xor", plugin: Any = None) -> tuple[Any, Any, Any]:
    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    if plugin is not None:
        manager.register_object(plugin, "test_corrupter")
    set_manager(manager)
    cfg = build_test_config(model={"path": str(MODEL)}, run={"run_dir": str(tmp_path / "run")},
                            weights={"transport": "disk", "delta": encoding})
    return cfg, DiskTransport(cfg), LocalEngine(cfg)


def _step(weights: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """An optimizer-like update, in place as an optimizer does it (the transport must not keep
    references to what it sent): small changes to a part of each weight matrix."""
    g = torch.Generator().manual_seed(seed)
    if "lm_head.weight" in weights:  # tied to the embedding in this model: one tensor
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    for k, v in weights.items():
        if v.dim() == 2 and k != "lm_head.weight":
            rows = max(1, v.shape[0] // 8)
            v[:rows] += 1e-4 * torch.randn(v[:rows].shape, generator=g, dtype=v.dtype)
    return weights


def _served(engine: LocalEngine) -> dict[str, torch.Tensor]:
    return engine.state_dict()


@pytest.mark.parametrize("encoding", ["xor", "overwrite"])
def test_deltas_give_the_exact_weights_in_fewer_bytes(tmp_path: Path, encoding: str) -> None:
    cfg, transport, engine = _setup(tmp_path, encoding)
    weights = _served(engine)
    sizes = []
    for version in range(4):
        if version:
            weights = _step(weights, version)
        stats = transport.send(weights, version, [engine])
        served = _served(engine)
        assert all(torch.equal(served[k], v) for k, v in weights.items()), version
        assert engine.weight_version() == version
        assert stats["delta"] == float(version > 0) and stats["resynced_engines"] == 0
        sizes.append(stats["bytes"])
    full = stats["full_bytes"]
    assert sizes[0] >= full * 0.99  # the first version is full
    assert all(s < full / 2 for s in sizes[1:]), (sizes, full)
    # only the two newest versions stay on disk
    assert sorted(p.name for p in (tmp_path / "run" / "weights").glob("v*")) == [
        "v000002", "v000003"]


def test_a_corrupt_delta_is_refused_and_the_engine_resynced(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    corrupter = Corrupter()
    cfg, transport, engine = _setup(tmp_path, "xor", corrupter)
    weights = _served(engine)
    transport.send(weights, 0, [engine])
    weights = _step(weights, 1)
    corrupter.armed = True
    stats = transport.send(weights, 1, [engine])
    assert corrupter.corrupted and stats["resynced_engines"] == 1
    assert "refused delta version 1" in capsys.readouterr().err
    served = _served(engine)
    assert all(torch.equal(served[k], v) for k, v in weights.items())
    assert (tmp_path / "run" / "weights" / "v000001.full" / "model.safetensors").is_file()
    # the next sync is a delta again, against the resynced version
    weights = _step(weights, 2)
    stats = transport.send(weights, 2, [engine])
    assert stats["delta"] == 1.0 and stats["resynced_engines"] == 0
    assert all(torch.equal(_served(engine)[k], v) for k, v in weights.items())


def test_an_engine_without_the_base_gets_the_full_version(tmp_path: Path) -> None:
    cfg, transport, engine = _setup(tmp_path, "overwrite")
    weights = _served(engine)
    transport.send(weights, 0, [engine])
    newcomer = LocalEngine(cfg)  # e.g. an engine restarted after a fault: no base in memory
    weights = _step(weights, 1)
    stats = transport.send(weights, 1, [engine, newcomer])
    assert stats["delta"] == 1.0 and stats["resynced_engines"] == 1
    for e in (engine, newcomer):
        assert all(torch.equal(_served(e)[k], v) for k, v in weights.items())


def test_apply_delta_names_what_is_wrong() -> None:
    base = {"w": torch.zeros(4), "b": torch.ones(2)}
    new = {"w": torch.tensor([0.0, 1.0, 0.0, 0.0]), "b": torch.ones(2)}
    manifest, blob = delta_mod.encode_delta(new, base, "overwrite", 0)
    other_base = {"w": torch.full((4,), 2.0), "b": torch.ones(2)}
    with pytest.raises(delta_mod.DeltaError, match="tensor w: checksum mismatch"):
        delta_mod.apply_delta(manifest, blob, other_base)
    with pytest.raises(delta_mod.DeltaError, match="checksum does not match its manifest"):
        delta_mod.apply_delta(manifest, blob[:-1], base)


def test_bad_delta_settings_are_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="weights.delta: 'gzip' is not one of off, xor"):
        build_test_config(weights={"delta": "gzip"})
    with pytest.raises(ConfigError, match="weights.delta: applies to the disk transport"):
        build_test_config(weights={"delta": "xor"})
