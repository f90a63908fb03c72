"""The ``torch`` trainer writes no checkpoint with a NaN or inf weight (training health,
issue 38; the checks themselves: ``core/tests/trainkit/test_health.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from slime_core.api import NonFiniteWeightsError
from slime_std.trainer.torch_trainer import _save_weights


def test_no_checkpoint_file_holds_an_inf_weight(tmp_path: Path) -> None:
    where = str(tmp_path / "model.safetensors")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.bias.fill_(float("inf"))
    with pytest.raises(NonFiniteWeightsError, match="bias"):
        _save_weights(model.state_dict(), where)
    assert not os.path.exists(where)
