"""Routing replay with the ``vllm`` engine, the parts that run without vLLM: the record says the
engine records routing, the preflight admits an MoE model on it and refuses a dense one, the
workers' rows become checked ``RoutedExperts`` (refusals name the request and field), and the
trainer's fused expert tensors are names the engine accepts in a weight sync."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from slime_core.moe.preflight import check_routing_replay
from slime_core.moe.routing import MoeShape, from_record
from slime_core.testing import TINY_QWEN3_MOE
from vllm_rollout.model_dir import fused_expert_shapes
from vllm_rollout.routes import MISSING, routes_record

SHAPE = MoeShape(layers=2, top_k=2, num_experts=8)
WHERE = "vllm engine 0: prompt 1 of this call (3 prompt + 2 generated tokens): routed experts"


def _rows(n: int) -> torch.Tensor:
    return (torch.arange(n * 4, dtype=torch.int16).view(n, 2, 2) * 3) % 8


def test_the_record_says_the_engine_records_routing_and_the_preflight_admits_it(
        config_data: Callable[..., dict[str, Any]], resolve_config: Callable[..., Any],
        tmp_path: Path) -> None:
    data = config_data(tmp_path / "run")
    data["model"]["init_config"] = dict(TINY_QWEN3_MOE)
    data["train"]["routing_replay"] = "rollout"
    manager, config = resolve_config(data)
    assert manager.registries.rollout_engine.get("vllm", require_available=False).routing_replay
    assert check_routing_replay(manager, config) == SHAPE
    dense, config = resolve_config(config_data(tmp_path / "run2"),
                                   overrides=("train.routing_replay=rollout",))
    with pytest.raises(ValueError, match="has no mixture-of-experts layers"):
        check_routing_replay(dense, config)


def test_rows_become_a_compact_record_of_every_position_but_the_last() -> None:
    rows = _rows(6)  # the workers may hold a position more than the sequence needs
    record = routes_record(rows, 4, SHAPE, WHERE)
    assert record.shape == (4, 2, 2) and record.dtype == "uint8"
    assert torch.equal(from_record(record).long(), rows[:4].long())


@pytest.mark.parametrize(("rows", "match"), [
    (None, "reported no expert ids"),
    (_rows(3), r"no expert ids for 1 of 4 positions \(first \[3\]\)"),
    (torch.cat([_rows(1), torch.full((1, 2, 2), MISSING, dtype=torch.int16), _rows(2)]),
     r"no expert ids for 1 of 4 positions \(first \[1\]\).*prefix-cache hit"),
    (_rows(4) + 8, r"expert ids span \[\d+, \d+\], the model has experts 0..7"),
    (torch.zeros(4, 2, 2, dtype=torch.int16), "routes twice to the same expert"),
    (_rows(4)[:, :1], r"shape \(4, 1, 2\), expected"),
])
def test_bad_rows_are_refused_naming_the_request_and_field(rows: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        routes_record(rows, 4, SHAPE, WHERE)
    assert str(err.value).startswith(WHERE)


def test_fused_expert_names_of_the_trainer_are_accepted() -> None:
    per_expert = {f"model.layers.{i}.mlp.experts.{e}.{p}.weight":
                  (64, 16) if p == "down_proj" else (16, 64)
                  for i in range(2) for e in range(8) for p in ("gate_proj", "up_proj", "down_proj")}
    fused = fused_expert_shapes({**per_expert, "model.layers.0.mlp.gate.weight": (8, 64)})
    assert fused == {f"model.layers.{i}.mlp.experts.{n}": s for i in range(2)
                     for n, s in (("gate_up_proj", (8, 32, 64)), ("down_proj", (8, 64, 16)))}
    # the shapes transformers keeps in memory for such a checkpoint
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(TINY_QWEN3_MOE, hidden_size=64, moe_intermediate_size=16)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg.pop("model_type"), **cfg))
    state = model.state_dict()
    for name, shape in fused.items():
        assert tuple(state[name].shape) == shape
    # a layer with one expert missing is not a uniform per-expert layout: not fused
    del per_expert["model.layers.1.mlp.experts.3.up_proj.weight"]
    assert set(fused_expert_shapes(per_expert)) == {"model.layers.0.mlp.experts.gate_up_proj",
                                                   "model.layers.0.mlp.experts.down_proj"}
