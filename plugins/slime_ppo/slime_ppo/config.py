"""The ``[ppo]`` config section and the cross-section checks of a PPO run (torch-free).

Discounting lives in ``[algorithm]``: ``algorithm.gamma`` (slime_grpo's key, shared with
REINFORCE++) and ``algorithm.lam`` (this plugin's, :class:`PPOAlgorithmKeys`), both default 1
(slime's defaults); the KL penalty in the reward is ``algorithm.kl_in_reward_coef`` with
``algorithm.kl_estimator``. :func:`algorithm` is ``config.algorithm`` typed with every key
this plugin reads: the core's, slime_grpo's shared ones
(``slime_grpo.config.SharedAlgorithmKeys``: ``gamma``, ``masked_steps``,
``kl_in_reward_estimator``) and its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from slime_hookspecs import Config

if TYPE_CHECKING:
    from slime_grpo.config import SharedAlgorithmKeys
    from slime_hookspecs.config import AlgorithmConfig

CRITIC_INITS = ("policy", "random")
ESTIMATOR = "gae"


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {msg}")


@dataclass
class PPOAlgorithmKeys:
    """What slime_ppo adds to the core's ``[algorithm]`` section."""

    lam: float = 1.0  # GAE lambda


if TYPE_CHECKING:
    class PPOAlgorithm(PPOAlgorithmKeys, SharedAlgorithmKeys, AlgorithmConfig):
        """The type of ``config.algorithm`` in a PPO run (slime_grpo and slime_ppo active):
        the core's keys, slime_grpo's shared keys and this plugin's. For the type checker
        only."""


def algorithm(config: Config) -> PPOAlgorithm:
    """``config.algorithm``, typed with the keys slime_ppo reads (no copy, no check: the
    merged section has them whenever both plugins are active, which slime_ppo's declared
    dependency on slime-grpo ensures)."""
    return cast("PPOAlgorithm", config.algorithm)


@dataclass
class PPOSection:
    critic_lr: float = 1e-5  # AdamW learning rate of the critic (constant)
    critic_weight_decay: float = 0.0  # AdamW weight decay of the critic
    # policy: backbone = a copy of the policy's architecture and weights (OpenRLHF, slime);
    # random: the policy's architecture, freshly initialised (seeded with run.seed + 1)
    critic_init: str = "policy"
    critic_micro_batch_tokens: int = (
        0  # token budget of one critic micro-batch (0: train.micro_batch_tokens)
    )
    value_clip: float = 0.2  # |v - v_old| clip of the value loss (0: no clipping); preset (verl: 0.5)
    value_loss_coef: float = 1.0  # factor on the value loss; preset (slime: 1, verl: 0.5)
    num_critic_only_steps: int = 0  # first N rollouts train only the critic (actor frozen)
    whiten_advantages: bool = False  # whiten GAE advantages over the batch's loss-masked tokens; preset (verl: true)
    value_clipfrac: str = "delta"  # preset: value_clipfrac counts |v - v_old| > value_clip, reduced like the loss (delta, slime) or a strictly larger clipped error, as a plain masked token mean whatever algorithm.loss_reducer (loss, verl)
    kl_in_reward_masked: bool = False  # preset: the KL penalty in the reward only on loss-masked tokens (verl: true; slime puts it on every token)

    def __post_init__(self) -> None:
        _need(self.critic_lr >= 0, "ppo.critic_lr", "must be >= 0")
        _need(self.critic_weight_decay >= 0, "ppo.critic_weight_decay", "must be >= 0")
        _need(
            self.critic_init in CRITIC_INITS,
            "ppo.critic_init",
            f"{self.critic_init!r} is not one of {', '.join(CRITIC_INITS)}",
        )
        _need(self.critic_micro_batch_tokens >= 0, "ppo.critic_micro_batch_tokens", "must be >= 0")
        _need(self.value_clip >= 0, "ppo.value_clip", "must be >= 0 (0 turns clipping off)")
        _need(self.value_loss_coef > 0, "ppo.value_loss_coef", "must be > 0")
        _need(self.num_critic_only_steps >= 0, "ppo.num_critic_only_steps", "must be >= 0")
        _need(self.value_clipfrac in ("delta", "loss"), "ppo.value_clipfrac",
              "must be delta or loss")

    # defaults per algorithm.numerics preset (the field defaults are the slime column)
    NUMERICS_PRESETS = {
        "slime": {"value_clip": 0.2, "value_loss_coef": 1.0, "whiten_advantages": False,
                  "value_clipfrac": "delta", "kl_in_reward_masked": False},
        "verl": {"value_clip": 0.5, "value_loss_coef": 0.5, "whiten_advantages": True,
                 "value_clipfrac": "loss", "kl_in_reward_masked": True},
    }


def uses_critic(config: Any) -> bool:
    """Whether this run trains a critic: RL loss and ``algorithm.advantage_estimator = "gae"``."""
    return config.train.loss != "sft" and algorithm(config).advantage_estimator == ESTIMATOR


def check_config(config: Any) -> None:
    """Reject combinations the critic cannot honour, naming the keys (``slime_configure``)."""
    ppo = getattr(config, "ppo", None)
    if ppo is None:
        return
    if not uses_critic(config):
        if ppo.num_critic_only_steps:
            raise ValueError(
                f"ppo.num_critic_only_steps = {ppo.num_critic_only_steps} needs a critic: set "
                'algorithm.advantage_estimator = "gae" (it is '
                f"{config.algorithm.advantage_estimator!r}, train.loss = {config.train.loss!r})"
            )
        return
    # algorithm.whiten_advantages (slime's --normalize-advantages) whitens GAE too, so the
    # slime preset (ppo.whiten_advantages = false) and that flag do not contradict each other
