"""Fixtures of the megatron backend tests: source-tree imports and tiny HF checkpoints."""

from __future__ import annotations

import sys
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from mg_support import TINY_LLAMA  # noqa: E402


def write_tiny(path: Path, model_type: str, **overrides: Any) -> Path:
    """A random tiny checkpoint of ``model_type`` with GQA (4 query heads, 2 key/value heads)
    over the tiny_arith vocabulary (its tokenizer is copied alongside)."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields: dict[str, Any] = dict(
        vocab_size=260, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        rms_norm_eps=1e-6, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    cfg = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # biases and norms away from their init, so a mix-up shows
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY_LLAMA / f, path / f)
    return path


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny(tmp_path_factory.mktemp("qwen2"), "qwen2")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny(tmp_path_factory.mktemp("qwen3"), "qwen3", tie_word_embeddings=True)


@pytest.fixture(scope="session")
def tiny_qwen3_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-MoE: 8 experts of 32, top-2, renormalised gates; the router at a spread that
    routes tokens to several experts."""
    return write_tiny(tmp_path_factory.mktemp("qwen3_moe"), "qwen3_moe", tie_word_embeddings=True,
                      num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      norm_topk_prob=True, initializer_range=0.2)


@pytest.fixture(scope="session")
def tiny_qwen3_moe_one_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-MoE with one (MoE) layer: where megatron's per-layer load-balancing
    loss and transformers' pooled one are the same function."""
    return write_tiny(tmp_path_factory.mktemp("qwen3_moe_1l"), "qwen3_moe", tie_word_embeddings=True,
                      num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      norm_topk_prob=True, initializer_range=0.2, num_hidden_layers=1)


@pytest.fixture(scope="session")
def tiny_qwen3_moe_unnormalised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-MoE with ``norm_topk_prob = false``: gates are the full softmax's
    probabilities of the chosen experts (megatron's pre-softmax router)."""
    return write_tiny(tmp_path_factory.mktemp("qwen3_moe_unnorm"), "qwen3_moe",
                      tie_word_embeddings=True, num_experts=8, num_experts_per_tok=2,
                      moe_intermediate_size=32, norm_topk_prob=False, initializer_range=0.2)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread, as the spawned ranks have (``mg_support._worker``): a comparison
    within 1e-4 run in the test process otherwise depends on the host's core count (two
    threads sum in another order and move a value by 1.0e-4) and on what earlier tests set."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
