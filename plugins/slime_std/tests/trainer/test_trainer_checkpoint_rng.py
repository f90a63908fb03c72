"""Trainer checkpoints carry the device generators' state, read and restored through the
selected accelerator record; a state the record cannot take warns and leaves training intact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.context import set_manager
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.testing import TINY_QWEN2, build_test_config, write_char_tokenizer
from slime_std.trainer.torch_trainer import TorchTrainer


class RecordingAccelerator:
    """The CPU, under a record that has device generators of its own (a counter here)."""

    device_type = "cpu"

    def __init__(self, state: int, refuse: bool = False) -> None:
        self.state, self.refuse = state, refuse
        self.restored: list[Any] = []

    def device(self, index: int = 0) -> torch.device:
        return torch.device("cpu")

    def get_rng_state(self) -> Any:
        return [torch.tensor([self.state], dtype=torch.uint8)]

    def set_rng_state(self, state: Any) -> None:
        if self.refuse:
            raise RuntimeError("2 device states for 1 device")
        self.restored.append(state)


@pytest.fixture
def config(tmp_path: Path) -> Any:
    set_manager(SlimePluginManager(PluginSelection(autoload=False)).load())
    tok = write_char_tokenizer(tmp_path / "tok")
    return build_test_config(model={"init_config": TINY_QWEN2, "tokenizer": str(tok)})


def test_device_rng_round_trips_through_the_checkpoint(config: Any, tmp_path: Path) -> None:
    TorchTrainer(config, accelerator=RecordingAccelerator(state=7)).save(str(tmp_path / "ck"))
    resumed = RecordingAccelerator(state=0)
    TorchTrainer(config, accelerator=resumed).load(str(tmp_path / "ck"))
    assert len(resumed.restored) == 1
    assert torch.equal(resumed.restored[0][0], torch.tensor([7], dtype=torch.uint8))


def test_a_device_rng_the_record_refuses_warns(config: Any, tmp_path: Path) -> None:
    TorchTrainer(config, accelerator=RecordingAccelerator(state=7)).save(str(tmp_path / "ck"))
    trainer = TorchTrainer(config, accelerator=RecordingAccelerator(state=0, refuse=True))
    with pytest.warns(UserWarning, match="device RNG state not restored"):
        trainer.load(str(tmp_path / "ck"))
    assert trainer.scheduler.last_epoch == 0  # the rest of the checkpoint was loaded


def test_checkpoints_without_device_rng_still_load(config: Any, tmp_path: Path) -> None:
    TorchTrainer(config).save(str(tmp_path / "ck"))  # no record: device_rng is None
    resumed = RecordingAccelerator(state=0)
    TorchTrainer(config, accelerator=resumed).load(str(tmp_path / "ck"))
    assert resumed.restored == []


def test_the_accelerator_decides_the_fused_optimizer(config: Any, tmp_path: Path) -> None:
    """``fused_optimizer`` on the accelerator object (torch has a fused AdamW on the CPU too,
    so the flag's effect runs here; the cpu accelerator sets it); absent, torch's own AdamW
    choice is kept. A checkpoint of either loads into the other."""
    from slime_std.accelerators.devices import CPUAccelerator

    fused = TorchTrainer(config, accelerator=CPUAccelerator())
    assert fused.optimizer.defaults["fused"] is True
    fused.save(str(tmp_path / "ck"))  # the optimizer state is the same format either way
    plain = TorchTrainer(config, accelerator=RecordingAccelerator(state=0))  # no attribute
    assert not plain.optimizer.defaults["fused"]
    plain.load(str(tmp_path / "ck"))
    plain.save(str(tmp_path / "ck2"))
    TorchTrainer(config, accelerator=CPUAccelerator()).load(str(tmp_path / "ck2"))
