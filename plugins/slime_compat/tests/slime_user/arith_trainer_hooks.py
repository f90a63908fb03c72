"""slime's trainer-side flags: --custom-advantage-function-path, --rollout-data-postprocess-path,
--custom-tis-function-path, --custom-pg-loss-reducer-function-path, the three
--custom-megatron-* hooks and --custom-update-weight-post-write-path, with the signatures of
slime/backends/megatron_utils/{loss.py,actor.py,model.py,initialize.py,update_weight/}."""

import os

import torch

from slime_user._record import record


def group_baseline(args, rollout_data) -> None:
    """REINFORCE with the group mean as baseline, broadcast over each response."""
    rewards = torch.tensor(rollout_data["rewards"], dtype=torch.float32)
    n = args.n_samples_per_prompt
    centered = (rewards.view(-1, n) - rewards.view(-1, n).mean(dim=-1, keepdim=True)).flatten()
    kl = rollout_data["kl"]
    rollout_data["advantages"] = [torch.ones_like(k) * a for k, a in zip(kl, centered, strict=True)]
    rollout_data["returns"] = rollout_data["advantages"]
    record("advantages", n=len(kl), mean_abs=float(centered.abs().mean()))


def check_rollout_data(args, rollout_id, rollout_data) -> None:
    lengths = rollout_data["response_lengths"]
    advs = rollout_data["advantages"]
    assert [len(a) for a in advs] == lengths
    record("postprocess", rollout_id=rollout_id, n=len(advs))


def clipped_tis(args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, **kwargs):
    """slime's vanilla_tis_function shape: token IS weights clamped at 2, flat pg_loss."""
    ratio = torch.cat([torch.exp(t - r) for t, r in zip(train_log_probs, rollout_log_probs, strict=True)])
    weights = ratio.clamp(0, 2.0).detach()
    record("tis", tokens=int(weights.numel()), lengths=len(kwargs["response_lengths"]))
    return pg_loss * weights, loss_masks, {"tis": weights.mean(), "tis_clipfrac": (weights != ratio).float().mean()}


def per_token_reducer(total_lengths, response_lengths, loss_masks, calculate_per_token_loss):
    masks = torch.cat([torch.as_tensor(m, dtype=torch.float32) for m in loss_masks])
    record("pg_reducer", samples=len(response_lengths), per_token=bool(calculate_per_token_loss))

    def reduce(x):
        return (x * masks.to(x.dtype)).sum() / masks.sum().clamp_min(1)

    return reduce


def megatron_init(args) -> None:
    record("megatron_init", lr=args.lr)


def before_log_prob(args, model, store_prefix) -> None:
    record("before_log_prob", store_prefix=store_prefix)


def before_train_step(args, rollout_id, step_id, model, optimizer, opt_param_scheduler) -> None:
    assert hasattr(optimizer, "param_groups")
    record("before_train_step", rollout_id=rollout_id, step_id=step_id)


def post_write(args, version_dir, rollout_engines) -> None:
    record("post_write", version=os.path.basename(version_dir), files=len(os.listdir(version_dir)),
           engines=len(rollout_engines))
