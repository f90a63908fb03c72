"""Entry point of the ``slime_ppo`` plugin: PPO with a critic, entirely through hooks.

Kept light (``core plugins`` never imports torch): the torch side lives in ``slime_ppo.glue``
and is imported inside the hooks, only in runs that use the ``gae`` estimator.

How a PPO step flows through the torch trainer (``--plugins slime_grpo,slime_ppo``,
``algorithm.advantage_estimator = "gae"``, actor loss ``algorithm.policy_loss = "ppo"`` from
slime_grpo's registry):

* ``slime_trainer_init``: builds the critic (value model + AdamW) on the actor's device;
* the ``gae`` advantage-estimator record (the only place GAE is computed): critic values with
  its current weights, KL-shaped token rewards, GAE, whitening, then
  ``train.num_steps_per_rollout`` critic steps on the returns; critic metrics travel in
  ``batch.metadata["metrics"]``;
* ``slime_before_train_step`` / ``slime_loss``: during the first ``ppo.num_critic_only_steps``
  rollouts the actor's loss is a gradient-free zero (its weights do not move);
* ``slime_trainer_save`` / ``slime_trainer_load``: the critic inside the atomic checkpoint.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import AdvantageEstimatorRecord, Config, ConfigSection, Records, hookimpl

from slime_ppo.config import ESTIMATOR, PPOAlgorithmKeys, PPOSection, check_config, uses_critic


def _active(config: Config) -> bool:
    """A run with this plugin's config section that trains a critic (the gae estimator)."""
    return hasattr(config, "ppo") and uses_critic(config)


records = Records()


# needs_ref stays False: the core computes reference log-probs whenever
# algorithm.kl_in_reward_coef > 0, which is exactly when GAE needs them.
@records.register(
    AdvantageEstimatorRecord, ESTIMATOR,
    summary="GAE (algorithm.gamma, lam) on critic values over loss-masked tokens, KL in the "
    "reward (algorithm.kl_in_reward_coef), returns = A + V, whitened; then the critic's update",
)
def gae(config: Config) -> Any:
    """``factory(config) -> estimate``: ``estimate(batch)`` computes the critic's values, GAE
    and returns, then trains the critic on the returns (``slime_ppo.glue``)."""

    def estimate(batch: Any) -> Any:
        from slime_ppo import glue

        return glue.advantages_and_critic_update(config, batch)

    return estimate


slime_register_advantage_estimators = records.hook(AdvantageEstimatorRecord)


@hookimpl
def slime_add_config(schema: Any) -> list[ConfigSection]:
    return [
        ConfigSection(
            name="ppo",
            schema=PPOSection,
            summary="PPO critic: lr, init, value clip and coefficient, critic-only warm-up, "
            "whitening",
        ),
        ConfigSection(name="algorithm", schema=PPOAlgorithmKeys, extends=True,
                      summary="GAE's lambda"),
    ]


@hookimpl
def slime_configure(config: Config) -> None:
    check_config(config)


@hookimpl
def slime_trainer_init(config: Config, model: Any) -> None:
    from slime_ppo import glue

    if _active(config):
        glue.init_critic(config, model)
    else:
        glue.reset()


@hookimpl
def slime_before_train_step(
    config: Config, rollout_id: int, step_id: int, model: Any, optimizer: Any, scheduler: Any
) -> None:
    if not _active(config):
        return
    from slime_ppo import glue

    glue.before_train_step(config, rollout_id, optimizer, scheduler)


@hookimpl(tryfirst=True)
def slime_loss(config: Config, batch: Any, log_probs: list[Any], reducer: Any) -> Any:
    # tryfirst: during the critic-only warm-up no other loss may move the actor.
    if not _active(config) or not config.ppo.num_critic_only_steps:
        return None
    from slime_ppo import glue

    return glue.frozen_loss(log_probs) if glue.actor_frozen(config) else None


@hookimpl
def slime_trainer_save(config: Config, path: str, rank: int) -> None:
    if not _active(config):
        return
    from slime_ppo import glue

    glue.save(path, rank)


@hookimpl
def slime_trainer_load(config: Config, path: str, rank: int) -> None:
    if not _active(config):
        return
    from slime_ppo import glue

    glue.load(path)
