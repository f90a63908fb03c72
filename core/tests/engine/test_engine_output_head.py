"""``block_output_head``: a wide LM head computed in column blocks for decode-sized inputs
gives exactly the logits of the single product, and keeps the model's parameters as they are."""

from __future__ import annotations

import torch
from slime_core.engine.model_loading import load_causal_lm
from slime_core.engine.output_head import BLOCK, MAX_ROWS, block_output_head

from .conftest import TINY_QWEN2


def _model(engine_config, vocab: int) -> torch.nn.Module:
    config = engine_config(model={"init_config": dict(TINY_QWEN2, vocab_size=vocab)})
    return load_causal_lm(config.model, "cpu", torch.float32, seed=0)


def test_blocks_give_the_same_logits_and_names(engine_config):
    vocab = 2 * BLOCK + 77  # a last, partial block
    plain, blocked = _model(engine_config, vocab), _model(engine_config, vocab)
    names = list(blocked.state_dict())
    assert block_output_head(blocked)
    assert list(blocked.state_dict()) == names
    assert blocked.lm_head.weight is blocked.model.embed_tokens.weight  # still tied
    g = torch.Generator().manual_seed(0)
    for rows in (1, 8, MAX_ROWS, MAX_ROWS + 1):
        ids = torch.randint(0, vocab, (rows, 3), generator=g)
        with torch.no_grad():
            want = plain(input_ids=ids).logits
            got = blocked(input_ids=ids).logits
        assert got.shape == (rows, 3, vocab)
        assert torch.equal(got, want)


def test_narrow_heads_are_left_alone(engine_config):
    model = _model(engine_config, 64)
    assert not block_output_head(model)
    assert "forward" not in vars(model.lm_head)


def test_the_cpu_engine_blocks_its_head(make_engine, engine_config):
    engine = make_engine(model={"init_config": dict(TINY_QWEN2, vocab_size=3 * BLOCK)})
    assert "forward" in vars(engine._model.lm_head)
