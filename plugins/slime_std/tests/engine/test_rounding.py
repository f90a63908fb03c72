"""``stochastic_bf16``: an unbiased rounding to the two bf16 neighbours, its noise drawn for
every weight or read from a :class:`NoisePool` (the CPU's)."""

from __future__ import annotations

import pytest
import torch
from slime_std.engine.rounding import NoisePool, stochastic_bf16


def _pool(kind: str) -> NoisePool | None:
    # a window far smaller than the tensors: every tensor spans several windows
    return NoisePool(torch.Generator().manual_seed(7), window=4096) if kind == "pool" else None


@pytest.mark.parametrize("kind", ["drawn", "pool"])
def test_rounds_up_with_the_dropped_fraction_and_only_to_neighbours(kind: str) -> None:
    gen = torch.Generator().manual_seed(0)
    pool = _pool(kind)
    for value, share_up in ((1 + 2 ** -9, 0.25), (-(1 + 3 * 2 ** -9), 0.75)):
        x = torch.full((100_000,), value)
        y = stochastic_bf16(x, gen, pool).float()
        lo, hi = sorted({1.0 * (1 if value > 0 else -1), (1 + 2 ** -7) * (1 if value > 0 else -1)})
        assert set(y.unique().tolist()) == {lo, hi}
        away = (y.abs() > 1).float().mean().item()  # rounded away from zero
        assert abs(away - share_up) < 0.01, (value, away)
        assert abs(y.mean().item() - value) < 1e-4  # unbiased


@pytest.mark.parametrize("kind", ["drawn", "pool"])
def test_exact_values_and_infinities_stay(kind: str) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0, 1.0, -2.5, 3.140625])
    assert torch.equal(stochastic_bf16(x, gen, _pool(kind)), x.bfloat16())


def test_pooled_noise_is_seeded_and_changes_from_one_sync_to_the_next() -> None:
    """The same seeds give the same rounding (a resumed run serves what an uninterrupted one
    did); the next sync's offsets give each weight other noise, so a weight held at the same
    value is not rounded the same way every time (its mean over syncs is the value)."""
    x = torch.full((3, 5000), 1 + 2 ** -9)
    pool = _pool("pool")
    first = stochastic_bf16(x, torch.Generator().manual_seed(3), pool)
    assert first.shape == x.shape
    assert torch.equal(first, stochastic_bf16(x, torch.Generator().manual_seed(3), _pool("pool")))
    syncs = torch.stack([stochastic_bf16(x, torch.Generator().manual_seed(s), pool).float()
                         for s in range(200)])
    per_weight = syncs.mean(0)
    assert abs(per_weight.mean().item() - (1 + 2 ** -9)) < 1e-4
    # each weight's share of syncs rounded up is near 1/4 (not 0 or 1 as a fixed noise gives)
    up = (syncs > 1).float().mean(0)
    assert 0.1 < up.min().item() and up.max().item() < 0.45
