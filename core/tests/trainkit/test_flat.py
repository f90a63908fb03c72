"""Per-sample views of one packed tensor (``split_samples``) and back (``flat_cat``)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from slime_core.api import flat_cat, split_samples
from slime_core.trainkit.flat import samples_as


def test_flat_cat_gives_back_the_packed_tensor_of_intact_views() -> None:
    packed = torch.arange(10.0)
    views = split_samples(packed, [3, 0, 7])
    assert [v.tolist() for v in views] == [[0.0, 1.0, 2.0], [], list(range(3, 10))]
    assert flat_cat(views) is packed


def test_a_changed_list_is_concatenated_anew() -> None:
    packed = torch.arange(6.0)
    views = split_samples(packed, [2, 4])
    views[1] = torch.tensor([9.0])
    out = flat_cat(views)
    assert out is not packed and out.tolist() == [0.0, 1.0, 9.0]
    views = split_samples(packed, [2, 4])
    views.append(torch.tensor([5.0]))
    assert flat_cat(views).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 5.0]
    views = split_samples(packed, [2, 4])
    del views[0]
    assert flat_cat(views).tolist() == [2.0, 3.0, 4.0, 5.0]


def test_gradients_through_the_packed_tensor_match_concatenation() -> None:
    """The loss reads the packed tensor instead of a concatenation of its views: the same
    gradient, and no concatenation in the backward graph."""
    base = torch.randn(9, requires_grad=True)
    lengths = [4, 5]
    weights = torch.randn(9)

    def loss(views: list[torch.Tensor]) -> torch.Tensor:
        return (flat_cat(views) * weights).sum() + views[1].pow(2).sum()

    out = loss(split_samples(base * 2, lengths))
    (got,) = torch.autograd.grad(out, base)
    ref = loss(list((base * 2).split(lengths)))  # a plain list: concatenated
    (want,) = torch.autograd.grad(ref, base)
    torch.testing.assert_close(got, want)


def test_copies_and_pickles_are_plain_lists() -> None:
    views = split_samples(torch.arange(4.0), [1, 3])
    for other in (copy.copy(views), pickle.loads(pickle.dumps(views))):
        assert type(other) is list
        assert [v.tolist() for v in other] == [[0.0], [1.0, 2.0, 3.0]]


def test_samples_as_converts_packed_once_and_stays_packed() -> None:
    packed = torch.tensor([1, 0, 1, 1], dtype=torch.bool)
    views = split_samples(packed, [2, 2])
    as_float = samples_as(views, torch.float32)
    assert flat_cat(as_float).dtype == torch.float32
    assert flat_cat(as_float) is flat_cat(as_float)  # packed, not concatenated each time
    assert samples_as(as_float, torch.float32) is as_float
    mixed = [torch.tensor([1, 0]), torch.tensor([1.0])]
    assert [v.dtype for v in samples_as(mixed, torch.float32)] == [torch.float32] * 2


def test_split_samples_refuses_lengths_that_do_not_tile_the_tensor() -> None:
    with pytest.raises(ValueError, match="1-D tensor of 5 values"):
        split_samples(torch.zeros(4), [2, 3])
    with pytest.raises(ValueError, match="1-D"):
        split_samples(torch.zeros(2, 2), [4])
