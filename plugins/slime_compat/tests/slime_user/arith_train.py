"""--custom-reward-post-process-path, --custom-convert-samples-to-train-data-path and
--custom-loss-function-path, with slime's signatures and helpers."""

import torch

from slime.backends.megatron_utils.loss import get_log_probs_and_entropy
from slime.utils.ppo_utils import compute_policy_loss
from slime.utils.types import Sample

from slime_user._record import record

CALLS = {"post": 0, "convert": 0, "loss": 0}


def group_norm(args, samples: list[Sample]):
    CALLS["post"] += 1
    record("post")
    raw = [s.get_reward_value(args) for s in samples]
    r = torch.tensor(raw, dtype=torch.float).reshape(-1, args.n_samples_per_prompt)
    r = r - r.mean(dim=-1, keepdim=True)
    r = r / (r.std(dim=-1, keepdim=True) + 1e-6)
    return raw, r.flatten().tolist()


def convert(args, samples: list[Sample]) -> dict:
    CALLS["convert"] += 1
    record("convert")
    raw, rewards = group_norm(args, samples)
    return {
        "tokens": [s.tokens for s in samples],
        "response_lengths": [s.response_length for s in samples],
        "rewards": rewards,
        "raw_reward": raw,
        "truncated": [1 if s.status == Sample.Status.TRUNCATED else 0 for s in samples],
        "sample_indices": [s.index for s in samples],
        "loss_masks": [[0] * s.response_length if s.remove_sample else s.loss_mask for s in samples],
        "rollout_log_probs": [s.rollout_log_probs for s in samples],
    }


def ppo_loss(args, batch, logits, sum_of_sample_mean):
    CALLS["loss"] += 1
    record("loss")
    _, out = get_log_probs_and_entropy(
        logits, args=args, unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"])
    log_probs = torch.cat(out["log_probs"], dim=0)
    old = torch.cat(batch["log_probs"], dim=0)
    advantages = torch.cat(batch["advantages"], dim=0)
    pg_loss, clipfrac = compute_policy_loss(old - log_probs, advantages, args.eps_clip,
                                            args.eps_clip_high)
    loss = sum_of_sample_mean(pg_loss)
    return loss, {"pg_loss": loss.detach(), "pg_clipfrac": sum_of_sample_mean(clipfrac)}
