"""``stream_output_head``: a wide LM head computed as ``(W @ x^T)^T`` for decode-sized inputs
gives the logits of the plain product (up to float rounding), and keeps the model's
parameters as they are."""

from __future__ import annotations

import torch
from slime_core.models.loading import load_causal_lm
from slime_std.engine.output_head import MAX_ROWS, MIN_COLUMNS, stream_output_head

from .conftest import TINY_QWEN2


def _model(engine_config, vocab: int) -> torch.nn.Module:
    config = engine_config(model={"init_config": dict(TINY_QWEN2, vocab_size=vocab)})
    return load_causal_lm(config.model, "cpu", torch.float32, seed=0)


def test_streamed_head_gives_the_same_logits_and_names(engine_config):
    vocab = MIN_COLUMNS + 77
    plain, blocked = _model(engine_config, vocab), _model(engine_config, vocab)
    names = list(blocked.state_dict())
    assert stream_output_head(blocked)
    assert list(blocked.state_dict()) == names
    assert blocked.lm_head.weight is blocked.model.embed_tokens.weight  # still tied
    g = torch.Generator().manual_seed(0)
    for rows in (1, 8, MAX_ROWS, MAX_ROWS + 1):
        ids = torch.randint(0, vocab, (rows, 3), generator=g)
        with torch.no_grad():
            want = plain(input_ids=ids).logits
            got = blocked(input_ids=ids).logits
        assert got.shape == (rows, 3, vocab)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert got.abs().max() > 0.1


def test_narrow_heads_are_left_alone(engine_config):
    model = _model(engine_config, 64)
    assert not stream_output_head(model)
    assert "forward" not in vars(model.lm_head)


def test_the_cpu_engine_streams_its_head(make_engine, engine_config):
    engine = make_engine(model={"init_config": dict(TINY_QWEN2, vocab_size=MIN_COLUMNS)})
    assert "forward" in vars(engine._model.lm_head)
