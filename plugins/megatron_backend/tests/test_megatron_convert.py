"""The HF <-> Megatron converters alone (no megatron-core import): every TP/PP split of each
family's state dict converts back to exactly the HF model's ``state_dict()``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mg_support import TINY_LLAMA


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_every_split_round_trips(family: str, tp: int, pp: int, tiny_qwen2: Path,
                                 tiny_qwen3: Path) -> None:
    from megatron_backend.convert import megatron_names, to_hf, to_megatron
    from megatron_backend.layout import layout_of
    from transformers import AutoModelForCausalLM

    path = {"llama": TINY_LLAMA, "qwen2": tiny_qwen2, "qwen3": tiny_qwen3}[family]
    model = AutoModelForCausalLM.from_pretrained(path)
    sd = model.state_dict()
    layout = layout_of(model.config, tp)
    merged: dict[str, torch.Tensor] = {}
    for stage in range(pp):
        shards = [to_megatron(sd, layout, r, tp, stage, pp) for r in range(tp)]
        names = megatron_names(layout, stage, pp)
        assert set(shards[0]) == set(names)
        for k, split in names.items():  # replicated tensors equal, split ones 1/tp of the rows
            if split is None:
                assert all(torch.equal(s[k], shards[0][k]) for s in shards)
        merged.update(to_hf({k: [s[k] for s in shards] for k in names}, layout, stage, pp))
    assert sorted(merged) == sorted(sd)
    for k, v in sd.items():
        assert torch.equal(merged[k], v), k


def test_qkv_is_grouped_by_key_value_head(tiny_qwen2: Path) -> None:
    from megatron_backend.convert import fuse_qkv
    from megatron_backend.layout import layout_of
    from transformers import AutoConfig

    layout = layout_of(AutoConfig.from_pretrained(tiny_qwen2))  # 4 heads, 2 groups, d = 16
    q = torch.arange(4 * 16).float() + 1000
    k = torch.arange(2 * 16).float() + 2000
    v = torch.arange(2 * 16).float() + 3000
    fused = fuse_qkv(q, k, v, layout)
    # group 0: q heads 0-1, k_0, v_0; group 1: q heads 2-3, k_1, v_1
    expect = torch.cat([q[:32], k[:16], v[:16], q[32:], k[16:], v[16:]])
    assert torch.equal(fused, expect)


def test_unsupported_configs_fail_before_loading() -> None:
    from megatron_backend.layout import layout_of
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(TINY_LLAMA)
    with pytest.raises(ValueError, match="must divide the attention heads"):
        layout_of(cfg, tp=4)
    cfg.rope_parameters = {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}
    with pytest.raises(ValueError, match="rope_type 'llama3' is not supported"):
        layout_of(cfg)
    gpt2 = AutoConfig.for_model("gpt2")
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported"):
        layout_of(gpt2)


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (1, 2), (2, 1)])
def test_moe_round_trips(tp: int, pp: int, tiny_qwen3_moe: Path) -> None:
    """Qwen3-MoE: router and experts convert to Megatron's MoE layer names and back exactly;
    with TP=2 each expert is split as a dense MLP (fc1 ``[gate_r; up_r]``, fc2 by columns)
    and the router replicated; TP and EP together are refused."""
    from megatron_backend.convert import megatron_names, to_hf, to_megatron
    from megatron_backend.layout import layout_of
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3_moe)
    sd = model.state_dict()
    layout = layout_of(model.config, tp)
    assert (layout.num_experts, layout.top_k, layout.moe_ffn) == (8, 2, 32) and layout.qk_norm
    merged: dict[str, torch.Tensor] = {}
    fc1 = "decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight"
    for stage in range(pp):
        shards = [to_megatron(sd, layout, r, tp, stage, pp) for r in range(tp)]
        names = megatron_names(layout, stage, pp)
        assert set(shards[0]) == set(names)
        assert shards[0][fc1].shape == (64 // tp, 64)
        assert all(torch.equal(s["decoder.layers.0.mlp.router.weight"],
                               shards[0]["decoder.layers.0.mlp.router.weight"]) for s in shards)
        merged.update(to_hf({k: [s[k] for s in shards] for k in names}, layout, stage, pp))
    assert sorted(merged) == sorted(sd)
    for k, v in sd.items():
        assert torch.equal(merged[k], v), k
    with pytest.raises(ValueError, match="both tensor_model_parallel_size = 2 and "
                                         "expert_model_parallel_size = 2 is not implemented"):
        layout_of(model.config, 2, ep=2)


def test_expert_parallel_ranks_hold_their_share_of_experts(tiny_qwen3_moe: Path) -> None:
    """EP=2: rank r holds global experts [4r, 4r + 4) as local experts 0..3; the ranks'
    shards, experts renamed to their global numbers, convert back to the HF weights exactly;
    an expert count EP does not divide is refused."""
    from megatron_backend.convert import (
        is_expert,
        local_experts,
        megatron_names,
        to_hf,
        to_megatron,
    )
    from megatron_backend.layout import layout_of
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3_moe)
    sd = model.state_dict()
    layout = layout_of(model.config, ep=2)
    shards: dict[str, list[torch.Tensor]] = {}
    for ep_rank in range(2):
        shard = to_megatron(sd, layout, ep_rank=ep_rank, ep_size=2)
        assert set(shard) == set(megatron_names(layout, ep_size=2))
        assert list(local_experts(layout, ep_rank, 2)) == list(range(4 * ep_rank, 4 * ep_rank + 4))
        assert torch.equal(shard["decoder.layers.1.mlp.experts.local_experts.2.linear_fc2.weight"],
                           sd["model.layers.1.mlp.experts.down_proj"][4 * ep_rank + 2])
        for k, v in shard.items():
            if is_expert(k):
                head, rest = k.split("local_experts.")
                e, tail = rest.split(".", 1)
                k = f"{head}local_experts.{4 * ep_rank + int(e)}.{tail}"
            shards[k] = [v]
    merged = to_hf(shards, layout)
    assert sorted(merged) == sorted(sd) and all(torch.equal(merged[k], sd[k]) for k in sd)
    with pytest.raises(ValueError, match="expert_model_parallel_size = 3 must divide the "
                                         "model's 8 experts"):
        layout_of(model.config, ep=3)
