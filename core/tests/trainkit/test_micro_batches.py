"""``micro_batches``: every sample once, padded sizes within the budget, as few micro-batches as
a greedy fill, and even row counts where the budget allows."""

from __future__ import annotations

import random

import pytest
from slime_core.trainkit.batching import micro_batches


def _check(lengths: list[int], budget: int, row_multiple: int = 1) -> list[list[int]]:
    mbs = micro_batches(lengths, budget, row_multiple)
    assert sorted(i for mb in mbs for i in mb) == list(range(len(lengths)))
    for mb in mbs:
        assert len(mb) == 1 or max(lengths[i] for i in mb) * len(mb) <= budget
    return mbs


def test_anchor_shapes_are_balanced():
    lengths = [267 + (i % 3) for i in range(128)]  # 128 samples of 267-269 tokens
    mbs = _check(lengths, 16384)
    assert [len(mb) for mb in mbs] == [43, 43, 42]


def test_graph_buckets_cut_the_runs_at_their_row_multiple():
    """Under train.cuda_graphs a run's rows are padded up to a multiple of 16: the anchor's
    43 + 43 + 42 rows computed 3 x 48; cut at the multiple they compute 128, none padded."""
    lengths = [267 + (i % 3) for i in range(128)]
    mbs = _check(lengths, 16384, 16)
    assert [len(mb) for mb in mbs] == [48, 48, 32]
    assert [i for mb in mbs for i in mb] == [i for mb in _check(lengths, 16384) for i in mb]
    # 100 rows in 2 runs: 7 blocks of 16 (112 padded rows, the least); 64 + 36 would pass the
    # budget (64 x 269 tokens), 48 + 52 does not
    assert [len(mb) for mb in _check(lengths[:100], 16384, 16)] == [48, 52]
    # where the aligned cut overflows the budget, the even one; fewer blocks than runs: even
    assert [len(mb) for mb in _check(lengths, 12900, 16)] == [43, 43, 42]
    assert [len(mb) for mb in _check([10] * 5, 20, 16)] == [2, 2, 1]


@pytest.mark.parametrize("seed", range(20))
def test_aligned_runs_keep_the_budget_and_pad_no_more_than_even_ones(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 200))]
    budget = rng.randint(50, 4000)
    padded = [sum(-(-len(mb) // 16) * 16 for mb in _check(lengths, budget, m)) for m in (1, 16)]
    assert padded[1] <= padded[0]
    assert len(_check(lengths, budget, 16)) == len(_check(lengths, budget))


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


def _plan(prompt: list[int], resp: list[int], groups: list[int], budget: int) -> list[list[int]]:
    from slime_core.trainkit.batching import shared_micro_batches

    lengths = [p + r for p, r in zip(prompt, resp, strict=True)]
    mbs = shared_micro_batches(lengths, resp, groups, budget)
    assert sorted(i for mb in mbs for i in mb) == list(range(len(lengths)))
    for mb in mbs:
        assert len(mb) == 1 or max(lengths[i] for i in mb) * len(mb) <= budget
    return mbs


def test_long_prompts_keep_groups_together():
    """Four groups of 4 with 500-token prompts and responses of 20-200 tokens: sorting by
    length would scatter each group; whole groups compute each prompt once."""
    rng = random.Random(0)
    groups = [i // 4 for i in range(16)]
    resp = [rng.randint(20, 200) for _ in groups]
    mbs = _plan([500] * 16, resp, groups, 2 * 4 * 700)
    assert all(len({groups[i] for i in mb}) * 4 == len(mb) for mb in mbs)  # whole groups only


def test_short_prompts_with_uneven_responses_sort_by_length():
    """Two groups of 4 with 2-token prompts; each group has two 10-token and two 300-token
    responses: padding the short ones costs more than sharing saves, so length order wins."""
    from slime_core.trainkit.batching import micro_batches

    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    resp = [10, 300, 10, 300, 10, 300, 10, 300]
    lengths = [2 + r for r in resp]
    mbs = _plan([2] * 8, resp, groups, 4 * 302)
    assert mbs == micro_batches(lengths, 4 * 302)


def test_a_group_over_the_budget_is_split():
    groups = [0] * 6 + [1] * 2
    mbs = _plan([100] * 8, [50] * 8, groups, 3 * 150)
    assert len(mbs) >= 3
