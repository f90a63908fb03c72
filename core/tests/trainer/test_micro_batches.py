"""``micro_batches``: every sample once, padded sizes within the budget, as few micro-batches as
a greedy fill, and even row counts where the budget allows."""

from __future__ import annotations

import random

import pytest
from slime_core.trainer.batching import micro_batches


def _check(lengths: list[int], budget: int) -> list[list[int]]:
    mbs = micro_batches(lengths, budget)
    assert sorted(i for mb in mbs for i in mb) == list(range(len(lengths)))
    for mb in mbs:
        assert len(mb) == 1 or max(lengths[i] for i in mb) * len(mb) <= budget
    return mbs


def test_anchor_shapes_are_balanced():
    lengths = [267 + (i % 3) for i in range(128)]  # 128 samples of 267-269 tokens
    mbs = _check(lengths, 16384)
    assert [len(mb) for mb in mbs] == [43, 43, 42]


def test_falls_back_to_the_greedy_cut_when_balancing_overflows():
    # greedy: six 1-token samples, then the two 10-token ones (2 x 10 = 20); even halves would
    # put two 10-token samples with two short ones: 4 x 10 = 40 > 20
    lengths = [1] * 6 + [10] * 2
    assert _check(lengths, 20) == [[0, 1, 2, 3, 4, 5], [6, 7]]


@pytest.mark.parametrize("seed", range(20))
def test_random_lengths_keep_the_budget_and_the_greedy_count(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 200))]
    budget = rng.randint(50, 4000)
    mbs = _check(lengths, budget)
    sizes = sorted(len(mb) for mb in mbs)
    if len(mbs) > 1 and sizes[-1] - sizes[0] > 1:  # not balanced: must be the greedy cut
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        assert [i for mb in mbs for i in mb] == order


def test_a_sample_longer_than_the_budget_is_alone():
    assert _check([5, 100, 6], 50) == [[0, 2], [1]]
