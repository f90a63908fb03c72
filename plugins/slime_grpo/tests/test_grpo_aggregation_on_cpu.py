"""Loss reducers: denominators worked out by hand."""

import pytest
import torch
from slime_grpo.ops import LOSS_AGG_MODES, get_reducer

# three samples: x = (1, 2, 3) mask (1, 1, 0) | x = (4, 5) mask (0, 1) | x = (6,) mask (0,)
X = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0]), torch.tensor([6.0])]
M = [torch.tensor([1, 1, 0]), torch.tensor([0, 1]), torch.tensor([0])]
LENS = [3, 2, 1]


def _reduce(name, x=X, masks=M, **kw):
    return get_reducer(name, LENS, masks, **kw)(x)


def test_token_mean():
    # (1 + 2 + 5) / 3 masked tokens
    torch.testing.assert_close(_reduce("token_mean"), torch.tensor(8 / 3))


def test_seq_mean_token_mean_default_counts_empty_sample():
    # per sample: (1 + 2) / 2 = 1.5, 5 / 1 = 5, fully masked -> 0 (still counted): (1.5 + 5 + 0) / 3
    torch.testing.assert_close(_reduce("seq_mean_token_mean"), torch.tensor(6.5 / 3))


def test_seq_mean_token_sum_and_norm():
    # sums 3, 5, 0 -> mean 8 / 3; Dr. GRPO norm by the constant 4: (3/4 + 5/4 + 0) / 3 = 2/3
    torch.testing.assert_close(_reduce("seq_mean_token_sum"), torch.tensor(8 / 3))
    torch.testing.assert_close(
        _reduce("seq_mean_token_sum_norm", max_response_length=4), torch.tensor(2 / 3)
    )


def test_packed_input_and_dashed_name():
    packed = torch.cat(X)
    torch.testing.assert_close(
        get_reducer("seq-mean-token-mean", LENS, M)(packed), torch.tensor(6.5 / 3)
    )


def test_rollout_ids_pool_samples_of_one_rollout():
    # rollout 0 = samples 0 and 1: (1 + 2 + 5) / (2 + 1) = 8/3; rollout 1 = sample 2: 0 -> (8/3 + 0) / 2
    torch.testing.assert_close(
        _reduce("seq_mean_token_mean", rollout_ids=[7, 7, 3]), torch.tensor(4 / 3)
    )


def test_denominator_masks_keep_rejected_tokens_in_the_mean():
    # token 1 of sample 0 rejected by an IS correction: numerator mask (1, 0, 0)
    rejected = [torch.tensor([1, 0, 0]), M[1], M[2]]
    # slime: original denominators -> (1/2 + 5/1 + 0) / 3 = 5.5 / 3; verl-like (rejected dropped): (1 + 5) / 3
    torch.testing.assert_close(
        _reduce("seq_mean_token_mean", masks=rejected, denominator_masks=M), torch.tensor(5.5 / 3)
    )
    torch.testing.assert_close(_reduce("seq_mean_token_mean", masks=rejected), torch.tensor(2.0))


def test_gradient_of_seq_mean_token_mean():
    x = [t.clone().requires_grad_() for t in X]
    _reduce("seq_mean_token_mean", x=x).backward()
    # d/dx_it = m_it / max(n_i, 1) / N: (1/6, 1/6, 0) | (0, 1/3) | (0,)
    torch.testing.assert_close(x[0].grad, torch.tensor([1 / 6, 1 / 6, 0.0]))
    torch.testing.assert_close(x[1].grad, torch.tensor([0.0, 1 / 3]))
    torch.testing.assert_close(x[2].grad, torch.tensor([0.0]))


def test_errors_name_the_choices():
    with pytest.raises(ValueError, match="choose one of: token_mean, seq_mean_token_mean"):
        get_reducer("mean", LENS, M)
    with pytest.raises(ValueError, match="max_response_length"):
        get_reducer("seq_mean_token_sum_norm", LENS, M)
    with pytest.raises(ValueError, match="expected"):
        get_reducer("token_mean", LENS, M)([torch.ones(3), torch.ones(3), torch.ones(1)])
    assert LOSS_AGG_MODES[1] == "seq_mean_token_mean"
