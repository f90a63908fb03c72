"""The local engine's Triton kernels (decode attention, the sampler's race) against their
torch references, where the kernels run: on CUDA, or on the CPU under Triton's interpreter
(``TRITON_INTERPRET=1`` with triton installed). Skipped otherwise (the CPU install has no
triton); ``core/tests/kernels/test_kernel_choice.py`` covers what runs without triton, and
``core/tests/kernels/test_head_kernels.py`` the trainer's log-prob head kernels."""

from __future__ import annotations

import pytest
import torch
from slime_core import kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(
    not kernels.available(DEVICE),
    reason="the Triton kernels need CUDA + triton (or TRITON_INTERPRET=1 with triton)")
# bf16 on CUDA (the dtype the engines and trainers use there); the interpreter computes with
# numpy, which has no bf16
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


def _decode_inputs(b: int, hkv: int, g: int, d: int, length: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hkv * g, 1, d, generator=gen).to(DEVICE, DTYPE)
    q = q.view(b, hkv, g, d)
    k = torch.randn(b, hkv, length, d, generator=gen).to(DEVICE, DTYPE)
    v = torch.randn(b, hkv, length, d, generator=gen).to(DEVICE, DTYPE)
    mask = torch.zeros(b, length, dtype=torch.bool)
    for i in range(b):  # left padding of i % 5 columns, written up to a row-dependent column
        lo = i % 5
        hi = min(length, 24 + (i * 37) % (length - 24))
        mask[i, lo:hi] = True
    return q, k, v, mask.to(DEVICE)


@pytest.mark.parametrize("shape", [(8, 2, 7, 64, 320), (5, 2, 6, 128, 1088), (3, 1, 1, 16, 70),
                                   (4, 4, 16, 64, 130)])
def test_decode_attention_matches_sdpa(shape: tuple[int, ...]) -> None:
    from slime_std.engine.kernels.decode_attention import decode_attention, reference

    b, hkv, g, d, length = shape
    q, k, v, mask = _decode_inputs(b, hkv, g, d, length)
    out = decode_attention(q, k, v, mask[:, None, None, :], d ** -0.5)
    ref = reference(q.float(), k.float(), v.float(), mask, d ** -0.5)
    tol = 2e-2 if DTYPE == torch.bfloat16 else 1e-5
    assert out.shape == q.shape and out.dtype == q.dtype
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)
    # the kernel's error is the same size as SDPA's own in that dtype
    if DTYPE == torch.bfloat16:
        sdpa = reference(q, k, v, mask, d ** -0.5).float()
        assert (out.float() - ref).abs().max() <= 2 * (sdpa - ref).abs().max() + 1e-3


@pytest.mark.parametrize("splits", [1, 2, 3, 5, 17])
def test_decode_attention_column_splits_match_sdpa(splits: int) -> None:
    # 17 splits of 64 columns over 1088: most splits of the short rows hold no written column
    from slime_std.engine.kernels.decode_attention import decode_attention, reference

    q, k, v, mask = _decode_inputs(5, 2, 6, 128, 1088, seed=splits)
    mask[0] = False
    mask[0, 1000:1010] = True  # the only written columns in the last splits
    out = decode_attention(q, k, v, mask, 128 ** -0.5, splits)
    ref = reference(q.float(), k.float(), v.float(), mask, 128 ** -0.5)
    tol = 2e-2 if DTYPE == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


def test_decode_attention_split_count() -> None:
    from slime_std.engine.kernels.decode_attention import MAX_SPLITS, MIN_SPLIT_COLS, num_splits

    cpu = torch.device("cpu")
    assert num_splits(10_000, 4096, cpu) == 1  # enough programs already
    assert num_splits(1, MIN_SPLIT_COLS, cpu) == 1  # too short to split
    assert num_splits(1, 100 * MIN_SPLIT_COLS, cpu) == MAX_SPLITS
    # the CPU counts 16 multiprocessors: 64 programs want 16 * 16 / 64 = 4 splits
    assert num_splits(64, 1088, cpu) == 4
    assert num_splits(8, 1088, cpu) == -(-1088 // MIN_SPLIT_COLS)  # bound by the length


def test_decode_attention_never_reads_unwritten_columns() -> None:
    # NaN in every masked column: a kernel that read (and zero-weighted) them would give NaN
    from slime_std.engine.kernels.decode_attention import decode_attention, reference

    q, k, v, mask = _decode_inputs(6, 2, 4, 64, 256, seed=3)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[~mask[:, None, :, None].expand_as(k)] = float("nan")
    v_nan[~mask[:, None, :, None].expand_as(v)] = float("nan")
    out = decode_attention(q, k_nan, v_nan, mask, 64 ** -0.5)
    assert torch.isfinite(out).all()
    split = decode_attention(q, k_nan, v_nan, mask, 64 ** -0.5, 4)
    assert torch.isfinite(split).all()
    ref = reference(q.float(), k.float(), v.float(), mask, 64 ** -0.5)
    tol = 2e-2 if DTYPE == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("splits", [1, 3])
def test_decode_attention_rope_rotates_writes_and_attends(splits: int) -> None:
    # the fused step: q/k/v as the projection gave them (one row: q heads | k heads | v
    # heads), the rotary embedding and the cache write in the kernel, against doing each apart
    from slime_std.engine.kernels.decode_attention import (
        decode_attention_rope,
        reference,
        rope_reference,
    )

    b, hkv, g, d, length = 5, 2, 7, 64, 320
    q, k, v, mask = _decode_inputs(b, hkv, g, d, length, seed=splits)
    gen = torch.Generator().manual_seed(9)
    qkv = torch.randn(b, (hkv * g + 2 * hkv) * d, generator=gen).to(DEVICE, DTYPE)
    angle = torch.rand(b, d // 2, generator=gen) * 6
    cos = torch.cat((angle.cos(), angle.cos()), -1).to(DEVICE, DTYPE)
    sin = torch.cat((-angle.sin(), angle.sin()), -1).to(DEVICE, DTYPE)
    col = 200  # in the second split of three, the first of one
    mask[:, col] = True
    q_raw = qkv[:, : hkv * g * d].view(b, hkv, g, d)
    k_new = qkv[:, hkv * g * d: (hkv * g + hkv) * d].view(b, hkv, d)
    v_new = qkv[:, (hkv * g + hkv) * d:].view(b, hkv, d)
    k_ref, v_ref = k.clone(), v.clone()
    k_ref[:, :, col] = rope_reference(k_new, cos[:, None], sin[:, None])
    v_ref[:, :, col] = v_new
    q_rot = rope_reference(q_raw, cos[:, None, None], sin[:, None, None])
    column = torch.tensor([col], device=DEVICE)
    out = decode_attention_rope(q_raw, k_new, v_new, cos, sin, column, k, v, mask, d ** -0.5,
                                splits)
    torch.testing.assert_close(k, k_ref, atol=0, rtol=0)  # the write, exactly; nothing else
    torch.testing.assert_close(v, v_ref, atol=0, rtol=0)
    ref = reference(q_rot.float(), k_ref.float(), v_ref.float(), mask, d ** -0.5)
    tol = 2e-2 if DTYPE == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("tuning", [{}, {"splits": 3}, {"skip_tiles": True},
                                    {"block_n": 32, "num_warps": 8, "num_stages": 3},
                                    {"block_n": 128, "splits": 2}])
def test_decode_attention_rope_long_padding_reads_only_written_columns(tuning: dict) -> None:
    # the fused step's loop ends at the step's column and has no per-tile branch: a row whose
    # first tiles are all left padding (its running max still -inf there) and splits wholly
    # past the column must give the reference, and no column outside [pad, col] may be read
    # (NaN there would show); each launch tuning the bench sweeps computes the same
    from slime_std.engine.kernels.decode_attention import _launch, reference

    b, hkv, g, d, length, col = 3, 2, 6, 64, 400, 260
    q, k, v, _ = _decode_inputs(b, hkv, g, d, length, seed=5)
    mask = torch.zeros(b, length, dtype=torch.bool, device=DEVICE)
    for i, pad in enumerate((0, 150, 259)):  # the last row attends to its new column only
        mask[i, pad:col + 1] = True
    k_new = torch.randn(b, hkv, d, device=DEVICE).to(DTYPE)
    v_new = torch.randn(b, hkv, d, device=DEVICE).to(DTYPE)
    ones = torch.ones(b, d, device=DEVICE, dtype=DTYPE)  # cos 1, sin 0: no rotation
    k_ref, v_ref = k.clone(), v.clone()
    k_ref[:, :, col], v_ref[:, :, col] = k_new, v_new
    k[~mask[:, None, :, None].expand_as(k)] = float("nan")
    v[~mask[:, None, :, None].expand_as(v)] = float("nan")
    column = torch.tensor([col], device=DEVICE)
    out = _launch(q, k, v, mask, d ** -0.5, tuning.pop("splits", None),
                  (k_new, v_new, ones, ones * 0, column), **tuning)
    assert torch.isfinite(out).all()
    ref = reference(q.float(), k_ref.float(), v_ref.float(), mask, d ** -0.5)
    tol = 2e-2 if DTYPE == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("splits", [1, 3])
def test_decode_attention_with_pdl_gives_the_same_bits(splits: int) -> None:
    # programmatic dependent launch only moves when the kernels start: the split kernel and
    # the combine kernel, launched early after a product that writes their input, inside a
    # captured CUDA graph as the decode step runs them, give exactly the plain launch's output
    # (where PDL is not supported, e.g. the interpreter, the flag is ignored)
    from slime_std.engine.kernels.decode_attention import decode_attention, decode_attention_rope

    b, hkv, g, d, length = 6, 2, 7, 64, 320
    q, k, v, mask = _decode_inputs(b, hkv, g, d, length, seed=11)
    w = torch.randn(d, d, generator=torch.Generator().manual_seed(1)).to(DEVICE, DTYPE) * 0.1
    col = 250
    mask[:, col + 1:] = False
    mask[:, col] = True
    k_new = torch.randn(b, hkv, d, device=DEVICE).to(DTYPE)
    v_new = torch.randn(b, hkv, d, device=DEVICE).to(DTYPE)
    ones = torch.ones(b, d, device=DEVICE, dtype=DTYPE)
    column = torch.tensor([col], device=DEVICE)
    k[:, :, col], v[:, :, col] = k_new, v_new  # the rope form's write (no rotation) repeats

    def step(pdl: bool) -> tuple[torch.Tensor, torch.Tensor]:
        qq = (q @ w).contiguous()  # the input written by the kernel just before
        plain = decode_attention(qq, k, v, mask, d ** -0.5, splits, pdl)
        rope = decode_attention_rope(qq, k_new, v_new, ones, ones * 0, column, k, v, mask,
                                     d ** -0.5, splits, pdl)
        return plain, rope

    want = step(False)
    if DEVICE == "cuda":
        step(True)  # compiled and warmed before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = step(True)
        graph.replay()
        torch.cuda.synchronize()
    else:
        got = step(True)
    for a, b_ in zip(got, want, strict=True):
        torch.testing.assert_close(a, b_, atol=0, rtol=0)


def test_decode_attention_compiles_as_one_op() -> None:
    if DEVICE != "cuda":
        pytest.skip("torch.compile of the custom op is checked on CUDA")
    from slime_std.engine.kernels.decode_attention import decode_attention

    q, k, v, mask = _decode_inputs(4, 2, 7, 64, 128)

    def f(q, k, v, m):
        return decode_attention(q * 1.0, k, v, m, 0.125) + 0

    eager = f(q, k, v, mask)
    compiled = torch.compile(f, fullgraph=True)(q, k, v, mask)
    torch.testing.assert_close(compiled, eager)


def test_static_decoder_steps_agree_between_sdpa_and_triton() -> None:
    """The engine's static decode path: the same prefill and steps through both attention
    functions, with transformers' decoder layers or the fused step, give the same logits (a
    grouped-query Qwen2, left-padded prompts, CUDA graphs captured and replayed; on the CPU
    under the interpreter, the same steps eagerly). The fused step also with its rotary
    embedding and cache write inside the attention kernel (``rollout.decode_fuse_rope``)."""
    from slime_std.engine.static_decode import StaticDecoders
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
    model = Qwen2ForCausalLM(cfg).to(DEVICE, DTYPE).eval()
    capture = DEVICE == "cuda"
    batch, width, new = 6, 12, 20
    ids = torch.randint(3, 512, (batch, width), device=DEVICE)
    prompt_mask = torch.ones(batch, width, dtype=torch.long, device=DEVICE)
    for i in range(batch):
        prompt_mask[i, : i % 4] = 0  # left padding
    pos = (prompt_mask.cumsum(1) - 1).clamp(min=0)
    from slime_std.engine.fused_decoder import FusedDecoder

    fused = FusedDecoder(model)  # the model's q/k/v and gate/up weights become views
    logits = {}
    for name, step, rope in [("sdpa", None, False), ("triton", None, False),
                             ("sdpa", fused, False), ("triton", fused, False),
                             ("triton", fused, True)]:
        decoders = StaticDecoders(capture=capture, decode_attention=name, fuse_rope=rope)
        dec = decoders.get(model, batch, width, new, step)
        with torch.no_grad():
            out = [dec.prefill(ids, prompt_mask, pos)]
            nxt = out[0].argmax(-1, keepdim=True)
            last = pos[:, -1:]
            for s in range(new):
                out.append(dec.step(nxt, last + 1 + s, width + s).clone())
                nxt = torch.randint(3, 512, (batch, 1), generator=torch.Generator().manual_seed(s))
                nxt = nxt.to(DEVICE)
        logits[(name, step is not None, rope)] = torch.stack(out).float()
    base = logits[("sdpa", False, False)]
    tol = 5e-2 if DTYPE == torch.bfloat16 else 1e-4
    for key, got in logits.items():  # graph-replayed steps: transformers' or the fused step
        torch.testing.assert_close(got, base, atol=tol, rtol=tol, msg=lambda m, k=key: f"{k}: {m}")


def _race_rows(rows: int, vocab: int, hot: dict[int, float], floor: float = -30.0) -> torch.Tensor:
    logits = torch.full((rows, vocab), floor)
    for col, value in hot.items():
        logits[:, col] = value
    return logits.to(DEVICE, DTYPE)


def test_race_sample_log_probs_are_log_softmax_across_slices() -> None:
    from slime_std.engine.kernels.race_sample import num_slices, race_sample

    rows, vocab = 4, 20000  # 10 tiles: two slices per row
    assert num_slices(rows, vocab) == 2
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    logits = (torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)) * 3).to(
        DEVICE, DTYPE)
    logits[:, 5000:6000] = float("-inf")  # e.g. masked vocabulary: never drawn
    for temperature in (1.0, 0.7):
        tokens, lp = race_sample(logits, temperature, gen)
        assert tokens.dtype == torch.int64 and lp.dtype == torch.float32
        assert not ((tokens >= 5000) & (tokens < 6000)).any()
        ref = torch.log_softmax(logits.float() / temperature, dim=-1)
        torch.testing.assert_close(lp, ref.gather(1, tokens.unsqueeze(1)).squeeze(1),
                                   atol=1e-5, rtol=1e-5)


def test_race_sample_draws_from_softmax() -> None:
    # a few hot tokens in both slices of a row, drawn many times: the frequencies
    # follow softmax (chi-square, 6 cells, p < 1e-4 to fail), the rest is never drawn
    from slime_std.engine.kernels.race_sample import race_sample

    hot = {3: 1.0, 1000: 0.0, 2500: 2.0, 4095: -1.0, 3000: 0.5}
    probs = torch.softmax(torch.tensor(list(hot.values())), 0)
    gen = torch.Generator(device=DEVICE).manual_seed(123)
    logits = _race_rows(64, 4096, hot)
    counts = torch.zeros(len(hot))
    cols = list(hot)
    draws = 0
    for _ in range(8):
        tokens, _ = race_sample(logits, 1.0, gen, slices=2)
        for t in tokens.tolist():
            assert t in hot, t
            counts[cols.index(t)] += 1
            draws += 1
    expected = probs * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 23.5, (counts.tolist(), expected.tolist())  # 4 dof, p = 1e-4


def test_race_sample_is_seeded_and_follows_the_temperature() -> None:
    from slime_std.engine.kernels.race_sample import race_sample

    logits = _race_rows(32, 3000, {10: 0.0, 20: 1.5})
    draw = [race_sample(logits, 1.0, torch.Generator(device=DEVICE).manual_seed(7))[0]
            for _ in range(2)]
    assert torch.equal(draw[0], draw[1])
    # a low temperature makes the larger logit (p = 0.82 at T = 1) nearly certain
    cold, _ = race_sample(logits, 0.05, torch.Generator(device=DEVICE).manual_seed(8))
    assert (cold == 20).all()
    hot_share = sum((race_sample(logits, 1.0, torch.Generator(device=DEVICE).manual_seed(s))[0]
                     == 10).sum().item() for s in range(8)) / (8 * 32)
    assert 0.08 < hot_share < 0.30  # p = 0.18
