"""Delta versions of the ``disk`` transport on real files, the real local engine and real
AdamW steps of the tiny arithmetic model: bit-exact round trips, refusals and full resyncs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.testing import build_test_config
from slime_hookspecs import hookimpl
from slime_std.weights import delta as delta_format
from slime_std.weights import disk

MODEL = Path(__file__).resolve().parents[4] / "examples" / "tiny_arith" / "model"


class Trainer:
    """The tiny model under real AdamW steps on a next-token loss (what a training step does
    to the bytes of its weights)."""

    def __init__(self, lr: float, dtype: torch.dtype = torch.float32) -> None:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        self.model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=dtype)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)

    def step(self) -> None:
        ids = torch.randint(3, 60, (4, 12))
        loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    """``setup(delta, *plugins, num_engines=1, **weights)`` -> (transport, engines)."""
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_std.engine.local_engine import LocalEngine

    def build(delta: str, *plugins: Any, num_engines: int = 1, **weights: Any) -> Any:
        manager = SlimePluginManager(PluginSelection(autoload=False)).load()
        for i, p in enumerate(plugins):
            manager.register_object(p, f"test_plugin_{i}")
        set_manager(manager)
        config = build_test_config(
            model={"path": str(MODEL)}, run={"output_dir": str(tmp_path)},
            weights={"transport": "disk", "dir": str(tmp_path / "w"), "delta": delta, **weights})
        engines = [LocalEngine(config, i, None) for i in range(num_engines)]
        return disk.DiskTransport(config), engines

    return build


def _assert_serves(engine: Any, sent: dict[str, torch.Tensor]) -> None:
    got = engine.state_dict()
    for name, t in sent.items():
        assert torch.equal(got[name].view(-1).view(torch.uint8),
                           t.to(got[name].dtype).reshape(-1).view(torch.uint8)), name


def _dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


@pytest.mark.parametrize("encoding", ["xor", "overwrite"])
def test_delta_round_trip_is_bit_exact(setup, tmp_path: Path, encoding: str) -> None:
    transport, engines = setup(encoding, num_engines=2)
    trainer = Trainer(lr=1e-3)
    for version in range(5):
        stats = transport.send(trainer.weights(), version, engines)
        assert stats["delta"] == (version > 0) and stats["resyncs"] == 0
        for e in engines:
            assert e.weight_version() == version
            _assert_serves(e, trainer.weights())
            # the held base is the sent bytes themselves (what the next delta applies to)
            held_version, held = disk._held[e]
            assert held_version == version and all(
                torch.equal(held[k].view(-1).view(torch.uint8),
                            v.contiguous().view(-1).view(torch.uint8))
                for k, v in trainer.weights().items())
        if version:
            manifest = json.loads((tmp_path / "w" / f"delta-v{version:06d}" /
                                   "manifest.json").read_text())
            assert manifest["base_version"] == version - 1
            assert manifest["encoding"] == encoding and manifest["tensors"]
        trainer.step()
    # the two newest versions and the newest full one (the first) are kept
    assert _dirs(tmp_path / "w") == ["delta-v000003", "delta-v000004", "v000000"]


def test_bf16_small_lr_delta_is_small(setup) -> None:
    """bf16 weights at a realistic learning rate keep most of their bytes: the delta is a
    fraction of the full version, and still bit-exact."""
    transport, (engine,) = setup("xor")
    trainer = Trainer(lr=1e-6, dtype=torch.bfloat16)
    transport.send(trainer.weights(), 0, [engine])
    trainer.step()
    stats = transport.send(trainer.weights(), 1, [engine])
    assert stats["delta"] == 1 and stats["written_bytes"] < 0.5 * stats["full_bytes"]
    assert all(torch.equal(disk._held[engine][1][k], v) for k, v in trainer.weights().items())


class Corrupt:
    """``slime_after_weights_written``: damage the delta of one version once it is written
    (as a bad disk or a partial upload would)."""

    def __init__(self, version: int, how: str) -> None:
        self.version, self.how, self.seen = version, how, []

    @hookimpl
    def slime_after_weights_written(self, config: Any, version_dir: str, engines: list[Any]) -> None:
        self.seen.append(os.path.basename(version_dir))
        if os.path.basename(version_dir) != f"delta-v{self.version:06d}":
            return
        path = os.path.join(version_dir, delta_format.DELTA_FILE)
        if self.how == "missing":
            os.remove(path)
        elif self.how == "flip":  # one byte of the file: its file checksum fails
            data = bytearray(Path(path).read_bytes())
            data[-1] ^= 0xFF
            Path(path).write_bytes(bytes(data))
        elif self.how == "tensor":  # a payload re-encoded wrong, file checksum updated to match
            from safetensors.torch import load_file, save_file

            payloads = load_file(path)
            name = sorted(payloads)[0]
            manifest_path = os.path.join(version_dir, delta_format.MANIFEST)
            manifest = json.loads(Path(manifest_path).read_text())
            entry = manifest["tensors"][name]
            wrong = torch.zeros(entry["shape"], dtype=getattr(torch, entry["dtype"]))
            import zlib

            raw = wrong.reshape(-1).view(torch.uint8).numpy()
            payloads[name] = torch.frombuffer(bytearray(zlib.compress(raw, 1)), dtype=torch.uint8)
            entry["kind"] = "raw"
            save_file(payloads, path)
            manifest["file_checksum"] = delta_format._file_checksum(path)
            Path(manifest_path).write_text(json.dumps(manifest))
            self.tensor = name


@pytest.mark.parametrize("how", ["flip", "missing", "tensor"])
def test_corrupt_delta_is_refused_and_resynced(setup, tmp_path: Path, capfd: Any,
                                               how: str) -> None:
    hook = Corrupt(2, how)
    transport, (engine,) = setup("xor", hook)
    trainer = Trainer(lr=1e-3)
    for version in range(4):
        stats = transport.send(trainer.weights(), version, [engine])
        assert stats["resyncs"] == (version == 2)
        assert engine.weight_version() == version
        _assert_serves(engine, trainer.weights())
        trainer.step()
    # version 2: the delta, then the full resync; version 3 is a delta on the resynced base
    assert hook.seen == ["v000000", "delta-v000001", "delta-v000002", "v000002",
                         "delta-v000003"]
    err = capfd.readouterr().err
    assert "refused" in err and "delta-v000002" in err and "full resync" in err
    expect = {"flip": "fails its checksum", "missing": "is missing",
              "tensor": f"tensor {getattr(hook, 'tensor', '')!r} fails its checksum"}[how]
    assert expect in err


def test_engine_off_the_base_version_is_resynced(setup, capfd: Any) -> None:
    """A delta's base is not what the engine serves (an engine that came back at another
    version, or never held the base's tensors): refused, then the full version loads."""
    transport, (engine, late) = setup("overwrite", num_engines=2)
    trainer = Trainer(lr=1e-3)
    transport.send(trainer.weights(), 0, [engine])
    trainer.step()
    transport.send(trainer.weights(), 1, [engine])
    trainer.step()
    # ``late`` serves its initial weights (version 0), not the base (1)
    stats = transport.send(trainer.weights(), 2, [engine, late])
    assert stats["resyncs"] == 1 and stats["delta"] == 1
    assert "the engine serves version 0, not the base" in capfd.readouterr().err
    # an engine at the base version whose process holds no base tensors (e.g. restarted and
    # loaded another way) is refused too
    disk._held.pop(engine)
    disk._last = None
    trainer.step()
    stats = transport.send(trainer.weights(), 3, [engine, late])
    assert stats["resyncs"] == 1
    assert "holds the tensors of version none" in capfd.readouterr().err
    for e in (engine, late):
        assert e.weight_version() == 3
        _assert_serves(e, trainer.weights())


def test_engines_that_load_files_get_full_versions(setup, tmp_path: Path) -> None:
    from slime_std.engine.local_engine import LocalEngine

    class FileLoader(LocalEngine):
        def update_weights_from_disk(self, version_dir: str, version: int) -> None:
            self.update_weights(disk.read_version_dir(version_dir, version), version)

    transport, (engine,) = setup("xor")
    loader = FileLoader(transport.config, 1, None)
    trainer = Trainer(lr=1e-3)
    for version in range(3):
        stats = transport.send(trainer.weights(), version, [loader])
        assert stats["delta"] == 0 and stats["written_bytes"] >= stats["full_bytes"]
        trainer.step()
    assert _dirs(tmp_path / "w") == ["v000001", "v000002"]
    # with an engine that takes deltas alongside it, both are written each sync
    stats = transport.send(trainer.weights(), 3, [engine, loader])  # engine: full (no base)
    trainer.step()
    stats = transport.send(trainer.weights(), 4, [engine, loader])
    assert stats["delta"] == 1 and stats["resyncs"] == 0
    assert {"delta-v000004", "v000004"} <= set(_dirs(tmp_path / "w"))
    for e in (engine, loader):
        _assert_serves(e, trainer.weights())


def test_periodic_full_versions(setup, tmp_path: Path) -> None:
    transport, (engine,) = setup("xor", delta_full_interval=2)
    trainer = Trainer(lr=1e-3)
    kinds = []
    for version in range(6):
        kinds.append(transport.send(trainer.weights(), version, [engine])["delta"])
        trainer.step()
    assert kinds == [0, 1, 1, 0, 1, 1]
    _assert_serves(engine, dict(disk._held[engine][1]))


def test_interrupted_writes_are_never_read_and_are_removed(setup, tmp_path: Path) -> None:
    """A writer killed mid-version leaves only a temporary directory, which no reader is ever
    given and the next transport removes."""
    root = tmp_path / "w"
    root.mkdir()
    partial = root / ".delta-v000004.tmp-12345"
    partial.mkdir()
    (partial / delta_format.DELTA_FILE).write_bytes(b"\x00" * 10)
    transport, (engine,) = setup("xor")
    assert not partial.exists()
    transport.send(Trainer(lr=1e-3).weights(), 0, [engine])
    assert _dirs(root) == ["v000000"]


@pytest.mark.parametrize("weights, match", [
    ({"transport": "disk", "delta": "zip"}, "weights.delta: must be 'off', 'xor' or 'overwrite'"),
    ({"transport": "inprocess", "delta": "xor"}, "weights.delta: deltas go over the disk"),
    ({"transport": "disk", "delta": "xor", "delta_full_interval": -1},
     "weights.delta_full_interval: must be >= 0"),
])
def test_bad_delta_config_is_refused(weights: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_test_config(weights=weights)
