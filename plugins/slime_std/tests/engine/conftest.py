"""Fixtures of the ``local`` engine tests: a tiny Qwen2 built from a config and a 64-token
tokenizer made with the ``tokenizers`` library (no network)."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest

TINY_QWEN2 = dict(
    model_type="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=256, tie_word_embeddings=True,
    # Peaked, varied distributions (the default 0.02 gives near-uniform logits), yet small
    # enough that cached and uncached fp32 forwards agree to a few 1e-6 in log-prob.
    initializer_range=0.2,
)

EOS_ID = 0  # the model emits id 0 when its logits are all equal (argmax takes the first)


def write_tiny_tokenizer(path: Path) -> Path:
    """Exactly 64 tokens: ``<eos>`` (0), ``<pad>`` (1), ``<unk>`` (2), single characters, and
    multi-character tokens the model may emit (encoding never produces them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {"<eos>": 0, "<pad>": 1, "<unk>": 2}
    for ch in string.digits + string.ascii_lowercase + " +=-*.,:;?!\n":
        vocab[ch] = len(vocab)
    for multi in ["ab", "cd", "ef", "the", "and", " =", "==", "12", "34", "ok", "no", "yes", "end"]:
        vocab[multi] = len(vocab)
    assert len(vocab) == 64
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    fast.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("engine_tokenizer"))


@pytest.fixture
def engine_config(make_config: Any, tokenizer_dir: Path) -> Any:
    """``engine_config(rollout={...}, model={...}, run={...})`` -> Config of the tiny model."""

    def build(**sections: dict[str, Any]) -> Any:
        model = {"init_config": dict(TINY_QWEN2), "tokenizer": str(tokenizer_dir)}
        model.update(sections.pop("model", {}))
        return make_config(model=model, **sections)

    return build


@pytest.fixture
def make_engine(engine_config: Any) -> Any:
    """``make_engine(rollout={...})`` -> a fresh ``LocalEngine`` (index 0, CPU)."""
    from slime_std.engine.local_engine import LocalEngine

    def build(engine_index: int = 0, **sections: dict[str, Any]) -> Any:
        return LocalEngine(engine_config(**sections), engine_index, None)

    return build


@pytest.fixture
def make_cuda_engine(engine_config: Any) -> Any:
    """``make_cuda_engine(rollout={...}, run={...})`` -> a fresh ``LocalEngine`` (index 0) on
    CUDA with ``rollout.cuda_graphs`` on, as the GPU-only tests build it."""
    from slime_std.accelerators.devices import TorchAccelerator
    from slime_std.engine.local_engine import LocalEngine

    def build(**sections: dict[str, Any]) -> Any:
        sections["rollout"] = {"cuda_graphs": True, **sections.get("rollout", {})}
        config = engine_config(**sections)
        return LocalEngine(config, 0, TorchAccelerator("cuda", fused_optimizer=True))

    return build
