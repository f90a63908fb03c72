"""``stochastic_bf16``: an unbiased rounding to the two bf16 neighbours."""

from __future__ import annotations

import torch
from slime_std.engine.rounding import stochastic_bf16


def test_rounds_up_with_the_dropped_fraction_and_only_to_neighbours() -> None:
    gen = torch.Generator().manual_seed(0)
    for value, share_up in ((1 + 2 ** -9, 0.25), (-(1 + 3 * 2 ** -9), 0.75)):
        x = torch.full((100_000,), value)
        y = stochastic_bf16(x, gen).float()
        lo, hi = sorted({1.0 * (1 if value > 0 else -1), (1 + 2 ** -7) * (1 if value > 0 else -1)})
        assert set(y.unique().tolist()) == {lo, hi}
        away = (y.abs() > 1).float().mean().item()  # rounded away from zero
        assert abs(away - share_up) < 0.01, (value, away)
        assert abs(y.mean().item() - value) < 1e-4  # unbiased


def test_exact_values_and_infinities_stay() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0, 1.0, -2.5, 3.140625])
    assert torch.equal(stochastic_bf16(x, gen), x.bfloat16())
