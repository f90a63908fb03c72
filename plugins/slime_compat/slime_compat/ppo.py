"""Behind the shim's ``slime.utils.ppo_utils`` and ``slime.backends.megatron_utils.loss``: the
helpers slime custom losses call, on flat response-token tensors (formulas as in slime)."""

from __future__ import annotations

from typing import Any


def compute_approx_kl(log_probs: Any, log_probs_base: Any, kl_loss_type: str,
                      importance_ratio: Any = None) -> Any:
    """k1 = log(p/p_base); k2 = k1^2 / 2; k3 / low_var_kl = exp(-k1) - 1 + k1 (low_var_kl is
    clamped to [-10, 10] after the optional importance ratio)."""
    import torch

    k1 = log_probs.float() - log_probs_base.float()
    if kl_loss_type == "k1":
        kl = k1
    elif kl_loss_type == "k2":
        kl = k1.pow(2) / 2.0
    elif kl_loss_type in ("k3", "low_var_kl"):
        kl = torch.exp(-k1) - 1 + k1
    else:
        raise ValueError(f"Unknown kl_loss_type: {kl_loss_type}")
    if importance_ratio is not None:
        kl = kl * importance_ratio
    return kl.clamp(-10, 10) if kl_loss_type == "low_var_kl" else kl


def compute_policy_loss(ppo_kl: Any, advantages: Any, eps_clip: float, eps_clip_high: float,
                        eps_clip_c: float | None = None) -> tuple[Any, Any]:
    """PPO's clipped surrogate with ratio = exp(-ppo_kl) (ppo_kl = old - new log-probs);
    dual clip at ``eps_clip_c`` for negative advantages. Returns (per-token loss, clipfrac)."""
    import torch

    ratio = torch.exp(-ppo_kl)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    loss = torch.maximum(unclipped, clipped)
    clipfrac = (clipped > unclipped).float()
    if eps_clip_c is not None:
        if eps_clip_c <= 1.0:
            raise ValueError(f"eps_clip_c must be > 1.0 for dual-clip PPO, got {eps_clip_c}")
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * eps_clip_c), loss)
    return loss, clipfrac


def get_grpo_returns(rewards: Any, kl: list[Any]) -> list[Any]:
    """Every response token of sample i gets reward i."""
    import torch

    return [torch.ones_like(k) * rewards[i] for i, k in enumerate(kl)]


class _NoEntropy(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> Any:
        raise KeyError(f"{key!r}: slime_compat hands custom losses the log-probs only (the "
                       "project's slime_loss hook receives no entropy); compute the loss "
                       "without it")


def get_log_probs_and_entropy(logits: Any, *, args: Any = None, unconcat_tokens: Any = None,
                              total_lengths: Any = None, response_lengths: Any = None,
                              with_entropy: bool = False, **kwargs: Any) -> tuple[None, dict[str, Any]]:
    """The per-sample response log-probs of the micro-batch: ``logits`` is what slime_compat
    passes custom losses (:class:`slime_compat.train_side.PolicyLogits`)."""
    lp = getattr(logits, "log_probs", None)
    if lp is None:
        raise TypeError("get_log_probs_and_entropy: expected the logits object slime_compat "
                        "passes custom loss functions")
    out = _NoEntropy(log_probs=lp)
    if with_entropy and logits.entropy is not None:
        out["entropy"] = logits.entropy
    return None, out
