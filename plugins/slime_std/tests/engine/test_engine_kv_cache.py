"""``BufferedLayer``: the preallocated KV layer returns what ``DynamicLayer``'s concatenation
returns, through growth past its capacity and row selection."""

from __future__ import annotations

import torch
from slime_std.engine.kv_cache import BufferedLayer, buffer_layers
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from .conftest import TINY_QWEN2


def _steps(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    first = (torch.randn(3, 2, 4, 5, generator=g), torch.randn(3, 2, 4, 6, generator=g))
    return [first] + [(torch.randn(3, 2, 1, 5, generator=g), torch.randn(3, 2, 1, 6, generator=g))
                      for _ in range(n)]


def test_matches_dynamic_layer_through_growth_and_row_selection():
    ref, buf = DynamicLayer(), BufferedLayer(capacity=6)  # 4 + 2 fit, then it grows
    keep = torch.tensor([0, 2])
    for i, (k, v) in enumerate(_steps(5)):
        if i == 3:
            ref.batch_select_indices(keep)
            buf.batch_select_indices(keep)
        if i >= 3:
            k, v = k[keep], v[keep]
        rk, rv = ref.update(k, v)
        bk, bv = buf.update(k, v)
        assert torch.equal(rk, bk) and torch.equal(rv, bv)
        assert buf.get_seq_length() == ref.get_seq_length() == 4 + i
    assert buf.capacity >= 9


def test_buffer_layers_swaps_only_fresh_plain_layers():
    from transformers import AutoConfig

    cfg = dict(TINY_QWEN2)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    cache = DynamicCache(config=config)
    assert buffer_layers(cache, 16)
    assert all(type(layer) is BufferedLayer for layer in cache.layers)
    used = DynamicCache(config=config)
    used.update(*_steps(0)[0], layer_idx=0)
    assert not buffer_layers(used, 16)
    assert all(type(layer) is DynamicLayer for layer in used.layers)
