"""``slime_core.weights.tensors.distinct``: one name per tensor for a weight sync."""

from __future__ import annotations

import torch

from slime_core.weights.tensors import distinct


def test_tied_names_collapse_to_the_first() -> None:
    embed = torch.randn(8, 4)
    state = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(4),
             "lm_head.weight": embed}
    assert list(distinct(state)) == ["model.embed_tokens.weight", "model.norm.weight"]


def test_views_and_empty_tensors_keep_their_names() -> None:
    base = torch.randn(8, 4)
    state = {
        "whole": base,
        "first_rows": base[:4],  # same address, another shape
        "flat": base.view(32),  # same address and bytes, another shape
        "transposed": base.t(),  # same address, another shape and stride
        "empty_a": torch.empty(0),
        "empty_b": torch.empty(0),  # a different tensor at address 0 too
    }
    assert list(distinct(state)) == list(state)


def test_equal_values_in_different_tensors_are_both_sent() -> None:
    a = torch.zeros(3)
    state = {"a": a, "b": a.clone()}
    assert list(distinct(state)) == ["a", "b"]
