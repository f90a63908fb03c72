"""Rollout/training mismatch corrections against hand-derived values."""

import math
from argparse import Namespace

import pytest
import torch
from slime_grpo.ops import IS_CORRECTIONS, icepop, seq_mask_tis, seq_tis, tis

LN = math.log


def _inputs():
    # token ratios rho = exp(train - rollout): sample 0 = (3, 0.5, 1), sample 1 = (1.5, 10 [loss-masked])
    train = [torch.full((3,), -1.0), torch.full((2,), -2.0)]
    rollout = [
        train[0] - torch.tensor([LN(3.0), LN(0.5), 0.0]),
        train[1] - torch.tensor([LN(1.5), LN(10.0)]),
    ]
    masks = [torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0, 0.0])]
    pg_loss = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])  # packed, as slime passes it
    return pg_loss, train, rollout, masks


def _close(a, b):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=torch.float32), atol=1e-5, rtol=1e-5)


def test_tis_truncates_at_c():
    pg, train, rollout, masks = _inputs()
    out, masks_out, metrics = tis(None, pg, train, rollout, masks)
    # default C = 2, low = 0: w = (2, 0.5, 1 | 1.5, 2) -> (2, 1, 3 | 6, 10)
    _close(out, [2.0, 1.0, 3.0, 6.0, 10.0])
    assert masks_out[1].tolist() == [1.0, 0.0]
    # metrics over the 4 loss-masked tokens: tis = (2 + 0.5 + 1 + 1.5) / 4 = 1.25,
    # raw ratio mean (3 + 0.5 + 1 + 1.5) / 4 = 1.5, clipfrac 1/4 (the masked ratio 10 is ignored),
    # |train - rollout| = (ln 3 + ln 2 + 0 + ln 1.5) / 4 = ln 9 / 4 = 0.5493061
    _close(metrics["tis"], 1.25)
    _close(metrics["tis_ratio"], 1.5)
    _close(metrics["tis_clipfrac"], 0.25)
    _close(metrics["mismatch_abs_logprob_diff"], LN(9.0) / 4)


def test_tis_reads_slime_config_names():
    pg, train, rollout, masks = _inputs()
    # tis_clip 1.2, tis_clip_low 0.6: w = (1.2, 0.6, 1 | 1.2, 1.2) -> (1.2, 1.2, 3 | 4.8, 6)
    out, _, metrics = tis(Namespace(tis_clip=1.2, tis_clip_low=0.6), pg, train, rollout, masks)
    _close(out, [1.2, 1.2, 3.0, 4.8, 6.0])
    _close(metrics["tis_clipfrac"], 0.75)
    out2, _, _ = tis(
        {"tis_clip": 1.2, "tis_clip_low": 0.6}, pg, train, rollout, masks, total_lengths=[9, 9]
    )
    _close(out2, [1.2, 1.2, 3.0, 4.8, 6.0])


def test_tis_weights_are_detached_and_list_input_returns_list():
    pg, train, rollout, masks = _inputs()
    train = [t.clone().requires_grad_() for t in train]
    pg_list = [pg[:3].clone().requires_grad_(), pg[3:].clone().requires_grad_()]
    out, _, _ = tis(None, pg_list, train, rollout, masks)
    assert isinstance(out, list) and len(out) == 2
    (out[0].sum() + out[1].sum()).backward()
    _close(pg_list[0].grad, [2.0, 0.5, 1.0])
    _close(pg_list[1].grad, [1.5, 2.0])
    assert train[0].grad is None


def test_seq_tis_product_over_masked_tokens():
    pg, train, rollout, masks = _inputs()
    # rho_0 = 3 * 0.5 * 1 = 1.5; rho_1 = 1.5 (the masked 10 is excluded, otherwise 15 -> 2)
    out, _, metrics = seq_tis(None, pg, train, rollout, masks)
    _close(out, [1.5, 3.0, 4.5, 6.0, 7.5])
    _close(metrics["tis"], 1.5)
    _close(metrics["tis_clipfrac"], 0.0)
    out, _, metrics = seq_tis({"tis_clip": 1.2}, pg, train, rollout, masks)
    _close(out, [1.2, 2.4, 3.6, 4.8, 6.0])
    _close(metrics["tis_clipfrac"], 1.0)


def test_seq_tis_safety_bound():
    # log-ratio 30 -> bounded at 20 before exp; truncated to C = 2 anyway, no inf / nan
    out, _, metrics = seq_tis(
        None, torch.ones(1), [torch.zeros(1)], [torch.tensor([-30.0])], [torch.ones(1)]
    )
    _close(out, [2.0])
    _close(metrics["tis_ratio"], math.exp(20.0))


def test_icepop_rejects_outside_the_band():
    pg, train, rollout, masks = _inputs()
    cfg = {"tis_clip_low": 0.6, "tis_clip": 2.0}
    out, masks_out, metrics = icepop(cfg, pg, train, rollout, masks)
    # rho (3, 0.5, 1 | 1.5, 10): inside [0.6, 2] -> (0, 0, 1 | 1.5, 0) -> loss (0, 0, 3 | 6, 0)
    _close(out, [0.0, 0.0, 3.0, 6.0, 0.0])
    assert masks_out[0].tolist() == [0.0, 0.0, 1.0] and masks_out[1].tolist() == [1.0, 0.0]
    _close(metrics["tis"], (0 + 0 + 1 + 1.5) / 4)
    _close(metrics["tis_clipfrac"], 0.5)
    # the band is inclusive: rho exactly 1 with low = 1 is kept
    out, _, _ = icepop(
        {"tis_clip_low": 1.0, "tis_clip": 2.0},
        torch.ones(1),
        [torch.zeros(1)],
        [torch.zeros(1)],
        [torch.ones(1)],
    )
    _close(out, [1.0])


def test_seq_mask_tis_geometric_filter_token_weights():
    pg, train, rollout, masks = _inputs()
    # geometric means: g_0 = 1.5 ** (1/3) = 1.1447 (kept), g_1 = 1.5 (rejected with high = 1.4)
    # kept sample: w = clamp(rho, 0.6, 1.4) = (1.4, 0.6, 1) -> (1.4, 1.2, 3); rejected: (0, 0)
    out, masks_out, metrics = seq_mask_tis(
        {"tis_clip_low": 0.6, "tis_clip": 1.4}, pg, train, rollout, masks
    )
    _close(out, [1.4, 1.2, 3.0, 0.0, 0.0])
    assert masks_out[0].tolist() == [1.0, 1.0, 1.0] and masks_out[1].tolist() == [0.0, 0.0]
    # changed tokens among the 4 masked ones: 1.4 != 3, 0.6 != 0.5, 0 != 1.5 -> 3/4
    _close(metrics["tis_clipfrac"], 0.75)
    # with high = 2 both sequences are kept: (2, 1.2, 3 | 6, 10)
    out, _, _ = seq_mask_tis({"tis_clip_low": 0.6, "tis_clip": 2.0}, pg, train, rollout, masks)
    _close(out, [2.0, 1.2, 3.0, 6.0, 10.0])


def test_bad_config_and_shapes_fail():
    pg, train, rollout, masks = _inputs()
    with pytest.raises(ValueError, match="tis_clip_low < tis_clip"):
        tis({"tis_clip": 0.5, "tis_clip_low": 1.0}, pg, train, rollout, masks)
    with pytest.raises(ValueError, match="pg_loss has 4 tokens"):
        tis(None, pg[:4], train, rollout, masks)


def test_registry_names():
    assert IS_CORRECTIONS == {
        "tis": tis,
        "seq_tis": seq_tis,
        "icepop": icepop,
        "seq_mask_tis": seq_mask_tis,
    }
