"""What the hooks of ``slime_ppo.plugin`` do, with the critic state of this process.

One trainer rank per process (the design's process model): the critic lives in the module
state ``STATE``, created by ``slime_trainer_init`` and replaced at the next one (so several
runs in one process, as in tests, never share a critic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from slime_core.api import get_manager

from slime_ppo.config import algorithm
from slime_ppo.critic import Critic, build_critic
from slime_ppo.estimator import KLFn, gae_estimate

CRITIC_DIR = "critic"  # inside the trainer's checkpoint directory


@dataclass
class PPOState:
    critic: Critic | None = None
    rollout_id: int = -1  # the rollout being trained (from slime_before_train_step)
    # actor scheduler position before the critic-only steps advanced it (rewound afterwards)
    rewind_epoch: int | None = None


STATE = PPOState()


def init_critic(config: Any, model: Any) -> None:
    """Build the critic next to the actor ``model``: the trainer backend's
    ``critic_factory`` (same device, dtype and sharding as the actor)."""
    global STATE
    STATE = PPOState()
    STATE.critic = build_critic(config, model)


def reset() -> None:
    """Forget the critic (a run without the gae estimator)."""
    global STATE
    STATE = PPOState()


def require_critic(where: str) -> Critic:
    if STATE.critic is None:
        raise RuntimeError(
            f"slime_ppo ({where}): algorithm.advantage_estimator = 'gae' but no critic was built "
            "in this process; the trainer backend must fire slime_trainer_init(config, model)"
        )
    return STATE.critic


def kl_estimator(config: Any) -> KLFn | None:
    """The reward penalty's KL estimator record (``algorithm.kl_in_reward_estimator``, empty:
    ``algorithm.kl_estimator``), built (from whichever plugin registers it, e.g. slime_grpo)."""
    alg = algorithm(config)
    if alg.kl_in_reward_coef == 0:
        return None
    rec = get_manager().registries.kl_estimator.get(alg.kl_in_reward_estimator or alg.kl_estimator)
    return rec.factory(config)  # type: ignore[no-any-return]


def _tensors(batch: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    tokens = [torch.as_tensor(t, dtype=torch.long) for t in batch.tokens]
    masks = [torch.as_tensor(m).float() for m in batch.loss_masks]
    return tokens, masks


def advantages_and_critic_update(
    config: Any, batch: Any
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Values with the critic's current weights, GAE, then the critic's update on the returns.

    Sets ``batch.values`` (unless a plugin already did) and returns ``(advantages, returns)``
    (the core sets ``batch.returns``); the critic's
    metrics go to ``batch.metadata["metrics"]``, which the trainer merges into its step metrics.
    """
    critic = require_critic("gae estimator")
    tokens, masks = _tensors(batch)
    if batch.values is None:
        batch.values = critic.values(tokens, batch.response_lengths)
    adv, ret, metrics = gae_estimate(config, batch, batch.values, kl_estimator(config))
    metrics.update(critic.train(tokens, batch.response_lengths, masks, batch.values, ret))
    batch.metadata.setdefault("metrics", {}).update(metrics)
    return adv, ret


# -- critic-only warm-up -------------------------------------------------------------------------


def actor_frozen(config: Any) -> bool:
    return STATE.critic is not None and STATE.rollout_id < config.ppo.num_critic_only_steps


def before_train_step(config: Any, rollout_id: int, optimizer: Any, scheduler: Any) -> None:
    """Track the rollout; keep the actor's LR schedule where it was before critic-only steps.

    A frozen step still runs the trainer's ``scheduler.step()``; slime skips the actor's train
    call instead, so its schedule starts at the first actor step. We rewind a ``LambdaLR``-like
    scheduler (``last_epoch``, ``base_lrs``, ``lr_lambdas``) to that position; other schedulers
    are left as they are.
    """
    STATE.rollout_id = rollout_id
    if STATE.critic is None:
        return
    if STATE.rewind_epoch is not None:
        rewind_scheduler(optimizer, scheduler, STATE.rewind_epoch)
        STATE.rewind_epoch = None
    if actor_frozen(config) and hasattr(scheduler, "lr_lambdas"):
        STATE.rewind_epoch = int(scheduler.last_epoch)


def rewind_scheduler(optimizer: Any, scheduler: Any, epoch: int) -> None:
    """Put a ``LambdaLR`` back at ``epoch`` and set the optimizer's LRs accordingly."""
    scheduler.last_epoch = epoch
    lrs = [
        base * fn(epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
    ]
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs  # what get_last_lr() reports


def frozen_loss(log_probs: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """A zero loss that leaves every actor gradient ``None``.

    A fresh leaf (not ``0 * log_probs``) so AdamW skips every parameter: no moment update, no
    weight decay, the weights stay bit-identical.
    """
    device = log_probs[0].device if log_probs else torch.device("cpu")
    loss = torch.zeros((), device=device, requires_grad=True)
    return loss, {"train/actor_frozen": 1.0, "train/loss": 0.0}


# -- checkpoints ----------------------------------------------------------------------------------


def save(path: str, rank: int) -> None:
    """The critic under ``<trainer checkpoint>/critic``; every rank calls the backend's
    ``save``, which decides which ranks write (the torch backend: rank 0; megatron: the first
    data-parallel rank of each TP shard)."""
    if STATE.critic is None:
        return
    import os

    STATE.critic.save(os.path.join(path, CRITIC_DIR), {"rewind_epoch": STATE.rewind_epoch})


def load(path: str) -> None:
    if STATE.critic is None:
        return
    import os

    extra = STATE.critic.load(os.path.join(path, CRITIC_DIR))
    STATE.rewind_epoch = extra.get("rewind_epoch")
