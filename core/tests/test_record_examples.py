"""The worked example of every record type (docs/hooks.md, from the record docstrings) runs."""

from __future__ import annotations

import inspect
import textwrap
from types import SimpleNamespace as NS
from typing import Any

import pytest
import slime_hookspecs
import torch
from slime_hookspecs import Records
from slime_hookspecs.records import RECORD_TYPES


def _example(rt: type) -> str:
    doc = inspect.getdoc(rt) or ""
    assert "Example" in doc and "::\n" in doc, f"{rt.__name__}: no worked example"
    block = []
    for line in doc.split("::\n", 1)[1].splitlines():
        if line.strip() and not line[0].isspace():  # the prose after the literal block
            break
        block.append(line)
    return textwrap.dedent("\n".join(block))


def _register_examples() -> Records:
    """Run every example (the classes they build, EchoEngine & co, only need to exist when a
    factory is called); the torch-level ones are called below."""
    records = Records()
    env: dict[str, Any] = {**vars(slime_hookspecs), "records": records, "torch": torch,
                           "TABLE": {"k": "v"}, "XpuAccelerator": object,
                           "xpu_present": lambda: False}
    for rt in RECORD_TYPES:
        exec(_example(rt), env)  # noqa: S102 - our own docstrings
    return records


@pytest.mark.parametrize("rt", RECORD_TYPES, ids=lambda rt: rt.__name__)
def test_each_record_type_has_one_example_registering_it(rt: type) -> None:
    assert len(_register_examples().of(rt)) == 1


def test_the_algorithm_examples_compute_what_they_say() -> None:
    from slime_hookspecs import (
        AdvantageEstimatorRecord,
        FilterRecord,
        ISCorrectionRecord,
        KLEstimatorRecord,
        LossReducerRecord,
        PolicyLossRecord,
        RewardFunctionRecord,
        ToolParserRecord,
        ToolRecord,
    )

    recs = _register_examples()
    cfg = NS(algorithm=NS(is_kwargs={"cap": 2.0}))
    masks = [torch.ones(3), torch.tensor([1.0, 0.0])]
    batch = NS(rewards=[1.0, 0.0], loss_masks=masks, advantages=[torch.ones(3), torch.ones(2)])
    adv, ret = recs.of(AdvantageEstimatorRecord)[0].factory(cfg)(batch)
    assert [a.tolist() for a in adv] == [[1.0, 1.0, 1.0], [0.0, 0.0]] and ret is adv
    lps = [torch.full((3,), -1.0), torch.full((2,), -2.0)]
    pg, metrics = recs.of(PolicyLossRecord)[0].factory(cfg)(batch, lps)
    assert [p.tolist() for p in pg] == [[1.0] * 3, [2.0] * 2] and metrics["train/pg_mean"] == 7.0
    kl = recs.of(KLEstimatorRecord)[0].factory(cfg)(torch.tensor([0.5]), torch.tensor([1.0]))
    assert kl.tolist() == [0.5]
    out, out_masks, _ = recs.of(ISCorrectionRecord)[0].factory(cfg)(
        [torch.ones(1)], [torch.tensor([1.0])], [torch.tensor([0.0])], [torch.ones(1)])
    assert out[0].item() == 2.0 and out_masks[0].item() == 1.0  # e^1 capped at 2
    reduce = recs.of(LossReducerRecord)[0].factory(cfg, [3, 2], masks)
    assert float(reduce([torch.ones(3), torch.ones(2)])) == float(reduce(torch.ones(5))) == 4.0
    assert recs.of(RewardFunctionRecord)[0].factory(cfg)(NS(response="Answer: 4")) == 1.0
    keep = recs.of(FilterRecord)[0].factory(cfg)
    assert keep([NS(reward=0.0), NS(reward=1.0)]).keep and not keep([NS(reward=0.0)]).keep
    assert recs.of(ToolRecord)[0].factory(cfg)(key="k") == "v"
    assert recs.of(ToolParserRecord)[0].factory(cfg, None)("hi") == ("hi", [], [])
