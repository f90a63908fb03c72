"""``rollout.packed_weights``: a CPU engine's fused-decoder products read weights packed for
oneDNN; the same tokens and log-probs as the plain products, packed again after every weight
update (a whole state dict or some tensors), refused where oneDNN cannot take the dtype."""

from __future__ import annotations

import pytest
import torch
from slime_hookspecs import SamplingParams
from slime_std.engine import packed_weights

GREEDY = [SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True)] * 4
PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
BF16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _packed(make_engine, **rollout):
    return make_engine(rollout={"packed_weights": True, **rollout})


@pytest.mark.parametrize("dtype", [torch.float32] + ([torch.bfloat16] if BF16 else []))
@pytest.mark.parametrize("rows", [1, 8, 60])
def test_the_packed_product_is_the_plain_one(dtype, rows):
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 40, generator=gen).to(dtype)
    bias = torch.randn(96, generator=gen).to(dtype)
    x = torch.randn(rows, 40, generator=gen).to(dtype)
    packed = packed_weights.pack(weight)
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    for b in (None, bias):
        want = x.double() @ weight.double().t() + (0 if b is None else b.double())
        got = packed_weights.packed_linear(x, packed, b)
        assert got.dtype == dtype and got.shape == (rows, 96)
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def test_a_packed_engine_generates_what_the_plain_one_does(make_engine):
    plain, packed = make_engine(), _packed(make_engine)
    assert packed._packed and not plain._packed
    assert all(p.packed is not None for p in packed._fused.projections())
    want, got = plain.generate(PROMPTS, GREEDY), packed.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(torch.tensor(a.log_probs), torch.tensor(b.log_probs),
                                   atol=1e-5, rtol=0)


def _shifted(engine, names=None):
    gen = torch.Generator().manual_seed(3)
    return {k: v + 0.5 * torch.randn(v.shape, generator=gen)
            for k, v in engine.state_dict().items() if names is None or k in names}


@pytest.mark.parametrize("part", ["all", "some"])
def test_a_weight_update_is_packed_again(make_engine, part):
    packed, fresh = _packed(make_engine), make_engine()
    before = packed.generate(PROMPTS, GREEDY)
    names = None
    if part == "some":  # one layer's attention and the (tied) embedding / output head
        names = {"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.o_proj.weight",
                 "model.embed_tokens.weight"}
    new = _shifted(packed, names)
    kept = {id(p): p.packed for p in packed._fused.projections()}
    packed.update_weights(new, 1)
    fresh.update_weights(new, 1)
    got, want = packed.generate(PROMPTS, GREEDY), fresh.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in got] != [o.token_ids for o in before]
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    layers = packed._fused.layers
    repacked = {id(p) for p in packed._fused.projections() if p.packed is not kept[id(p)]}
    if part == "all":
        assert len(repacked) == len(kept)
    else:  # only what the update wrote: layer 1's q/k/v (one fused weight) and o, the head
        assert repacked == {id(layers[1].qkv), id(layers[1].o), id(packed._fused.head_projection)}


def test_packing_is_refused_where_onednn_cannot_take_the_dtype(make_engine):
    with pytest.raises(ValueError, match=r"rollout.packed_weights = true: .*float16"):
        _packed(make_engine, dtype="float16")
    assert packed_weights.unsupported(torch.device("cuda"), torch.float32) is not None


def test_without_the_fused_decoder_nothing_is_packed(make_engine):
    with pytest.warns(UserWarning, match="rollout.packed_weights: the products stay unpacked"):
        engine = _packed(make_engine, fused_decoder=False)
    assert not engine._packed
    assert len(engine.generate(PROMPTS, GREEDY)[0].token_ids) == 12
